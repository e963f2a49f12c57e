-- The gateway's admission of one request (gateway.limits), all or nothing: the tenant's rate
-- and in-flight cap, the version's concurrency and, once it has an engine, that engine's
-- in-flight count behind the pin guard (admit). Composed after distinct_unpinned.lua and
-- admit.lua, and run inside ledger_enter.lua.
-- KEYS: rpm counter, tenant in-flight counter, concurrency counter, engine in-flight hash,
-- engine pinned set.
-- ARGV: rpm limit (0 none, -1 not counted), tenant in-flight cap (same), concurrency cap (same),
-- the request's weight, served name, the engine's max_loras (-2: not admitted to an engine yet).
-- A request is charged its weight (sequences it will run) against all three counts; one heavier
-- than a cap still runs when it is alone (nothing else counted), or it could never run.
-- Returns {0 admitted | 1 over the rate | 2 over concurrency | 3 counted, engine busy |
-- 4 over the tenant's in-flight cap | 7 background, held for live traffic (nothing counted by
-- this call), count}.
local weight = tonumber(ARGV[4])
local rpm = tonumber(ARGV[1])
if rpm >= 0 then
  local used = redis.call('INCRBY', KEYS[1], weight)
  if used == weight then redis.call('EXPIRE', KEYS[1], 120) end
  if rpm > 0 and used > rpm and used > weight then return {1, used} end
end
-- Count `weight` more in flight under `key`; false (and nothing counted) when over `cap`.
local function hold(key, cap, weight)
  local running = redis.call('INCRBY', key, weight)
  redis.call('EXPIRE', key, CONCURRENCY_TTL)
  if cap > 0 and running > cap and running > weight then
    redis.call('DECRBY', key, weight)
    return false, running - weight
  end
  return true, 0
end
local tenant_cap = tonumber(ARGV[2])
if tenant_cap >= 0 then
  local held, running = hold(KEYS[2], tenant_cap, weight)
  if not held then return {4, running} end
end
local cap = tonumber(ARGV[3])
if cap >= 0 then
  local held, running = hold(KEYS[3], cap, weight)
  if not held then
    if tenant_cap >= 0 then redis.call('DECRBY', KEYS[2], weight) end
    return {2, running}
  end
end
local max_loras = tonumber(ARGV[6])
if max_loras == -2 then return {0, 0} end
-- Live traffic first, across replicas (docs/decisions/0011-live-headroom.md). Appended after
-- every other part's ARGV: [#-2] the request's lane on the engine ('live' or 'background';
-- anything else: not counted), [#-1] the engine's slots, [#] the slots kept free for live
-- requests (GATEWAY_LIVE_HEADROOM); the last KEYS entry but the ledger: the engine's load hash
-- (lane -> weight in flight). A background request goes in only when the engine keeps that
-- many slots free after it (or nothing runs there); else {7, slots busy}, with what this call
-- counted given back: the caller waits and asks again. max_loras -3: a base-model request (no
-- adapter to admit, its lane counted only).
local lane, load = lane_of(ARGV), KEYS[#KEYS - 1]
if lane == 'background' then
  local busy = 0
  for _, n in ipairs(redis.call('HVALS', load)) do busy = busy + tonumber(n) end
  if busy > 0 and busy + weight > tonumber(ARGV[#ARGV - 1]) - tonumber(ARGV[#ARGV]) then
    if rpm >= 0 then redis.call('DECRBY', KEYS[1], weight) end
    if tenant_cap >= 0 then redis.call('DECRBY', KEYS[2], weight) end
    if cap >= 0 then redis.call('DECRBY', KEYS[3], weight) end
    return {7, busy}
  end
end
if max_loras ~= -3 and not admit(KEYS[4], KEYS[5], ARGV[5], max_loras) then return {3, 0} end
if lane ~= '' then
  redis.call('HINCRBY', load, lane, weight)
  redis.call('EXPIRE', load, CONCURRENCY_TTL)
end
return {0, 0}
