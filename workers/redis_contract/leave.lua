-- The gateway's release of what a request holds. Composed after ledger.lua.
-- KEYS: tenant in-flight counter, concurrency counter, engine in-flight hash, [the engine's load
-- hash,] the ledger (with the request). ARGV: weight to give back to the tenant and to the
-- version's concurrency (0: none), served name to lower on the engine ('' for none), [the lane
-- and the weight to lower in the load hash, [its service class's field there ('class:<name>')]].
-- Gives back at most what the request's ledger entries hold; what the classes give back is added
-- to the load hash's `drained` count (the engine's drain rate, gateway.class_policy.DrainMeter).
local function take(field, wanted)
  field = request .. '\n' .. field
  local held = tonumber(redis.call('HGET', ledger, field) or '0')
  local n = math.min(wanted, held)
  if n <= 0 then return 0 end
  if held - n <= 0 then redis.call('HDEL', ledger, field)
  else redis.call('HINCRBY', ledger, field, -n) end
  return n
end
for i = 1, 2 do
  local n = take(KEYS[i], tonumber(ARGV[i]))
  if n > 0 then redis.call('DECRBY', KEYS[i], n) end
end
if ARGV[3] ~= '' and take(KEYS[3] .. '\n' .. ARGV[3], 1) > 0 then
  local left = redis.call('HINCRBY', KEYS[3], ARGV[3], -1)
  if left <= 0 then redis.call('HDEL', KEYS[3], ARGV[3]) end
end
if ARGV[4] and ARGV[4] ~= '' then
  local n = take(KEYS[4] .. '\n' .. ARGV[4], tonumber(ARGV[5]))
  if n > 0 and redis.call('HINCRBY', KEYS[4], ARGV[4], -n) <= 0 then
    redis.call('HDEL', KEYS[4], ARGV[4])
  end
  if ARGV[6] and ARGV[6] ~= '' then
    local c = take(KEYS[4] .. '\n' .. ARGV[6], tonumber(ARGV[5]))
    if c > 0 then
      if redis.call('HINCRBY', KEYS[4], ARGV[6], -c) <= 0 then redis.call('HDEL', KEYS[4], ARGV[6]) end
      redis.call('HINCRBY', KEYS[4], 'drained', c)
    end
  end
end
return 0
