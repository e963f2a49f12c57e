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
-- this call), count} or {8 held for its service class's share (nothing counted by this call),
-- drained, class, load, class, load, ...}.
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
local lanes = redis.call('HMGET', load, 'live', 'background')
local busy = tonumber(lanes[1] or '0') + tonumber(lanes[2] or '0')
if lane == 'background' then
  if busy > 0 and busy + weight > tonumber(ARGV[#ARGV - 1]) - tonumber(ARGV[#ARGV]) then
    if rpm >= 0 then redis.call('DECRBY', KEYS[1], weight) end
    if tenant_cap >= 0 then redis.call('DECRBY', KEYS[2], weight) end
    if cap >= 0 then redis.call('DECRBY', KEYS[3], weight) end
    return {7, busy}
  end
end
-- Service classes (gateway.class_policy.may_take, mirrored here so that the shares hold across
-- replicas): a live request of a class goes onto an idle engine, and onto a busy one while it
-- keeps room for it (all its
-- slots for a class that may not be shed; a sheddable one leaves the last slots free, the
-- headroom for the others); past that, only while its class holds nothing or stays within its
-- weighted max-min fair share of the engine (a sheddable class only while the classes that may
-- not be shed hold all of its room by themselves); else {8, the engine's drained count, then each
-- class and its load}, with what this call counted given back: the caller waits and asks again,
-- or is shed. The classes' spec: `gold=6,silver=3*,bronze=1*;2`, each class's weight (`*`: it
-- may be shed), then the headroom (GATEWAY_CLASS_HEADROOM; a sheddable class's room is the
-- engine's slots less it, at least one: gateway.class_policy.room).
local class = lane == 'live' and class_of(ARGV) or ''
if class ~= '' then
  local weights, demand, names, sheddable = {}, {}, {}, {}
  local spec = ARGV[#ARGV - 4]
  for name, w, star in string.gmatch(spec, '([%w_-]+)=(%d+)(%*?)') do
    weights[name] = math.max(1, tonumber(w))
    sheddable[name] = star == '*'
    demand[name] = tonumber(redis.call('HGET', load, 'class:' .. name) or '0')
    names[#names + 1] = name
  end
  if not weights[class] then
    weights[class] = 1
    sheddable[class] = true
    demand[class] = tonumber(redis.call('HGET', load, 'class:' .. class) or '0')
    names[#names + 1] = class
  end
  local mine = demand[class]
  local capacity = tonumber(ARGV[#ARGV - 1])
  local room = capacity
  if sheddable[class] then
    room = math.max(1, capacity - tonumber(string.match(spec, ';(%d+)$') or '0'))
  end
  local crowded = room == capacity
  if not crowded then
    local kept = 0
    for _, name in ipairs(names) do
      if not sheddable[name] then kept = kept + demand[name] end
    end
    crowded = kept >= room
  end
  if busy + weight > room and busy > 0 and (not crowded or mine > 0) then
    -- Water filling: who wants less than its weight's part keeps what it wants; the rest of
    -- the slots go round again by weight.
    demand[class] = mine + weight
    local share, wanting, left = {}, {}, capacity
    for _, name in ipairs(names) do
      share[name] = 0
      if demand[name] > 0 then wanting[name] = true end
    end
    while next(wanting) ~= nil and left > 1e-9 do
      local total = 0
      for name in pairs(wanting) do total = total + weights[name] end
      local done = {}
      for name in pairs(wanting) do
        if demand[name] - share[name] <= left * weights[name] / total + 1e-9 then
          done[#done + 1] = name
        end
      end
      if #done == 0 then
        for name in pairs(wanting) do share[name] = share[name] + left * weights[name] / total end
        left = 0
      else
        for _, name in ipairs(done) do
          left = left - (demand[name] - share[name])
          share[name] = demand[name]
          wanting[name] = nil
        end
      end
    end
    if not crowded or mine + weight > share[class] + 1e-9 then
      if rpm >= 0 then redis.call('DECRBY', KEYS[1], weight) end
      if tenant_cap >= 0 then redis.call('DECRBY', KEYS[2], weight) end
      if cap >= 0 then redis.call('DECRBY', KEYS[3], weight) end
      local out = {8, tonumber(redis.call('HGET', load, 'drained') or '0')}
      for _, name in ipairs(names) do
        out[#out + 1] = name
        out[#out + 1] = name == class and mine or demand[name]
      end
      return out
    end
  end
end
if max_loras ~= -3 and not admit(KEYS[4], KEYS[5], ARGV[5], max_loras) then return {3, 0} end
if lane ~= '' then
  redis.call('HINCRBY', load, lane, weight)
  if class ~= '' then redis.call('HINCRBY', load, 'class:' .. class, weight) end
  redis.call('EXPIRE', load, CONCURRENCY_TTL)
end
return {0, 0}
