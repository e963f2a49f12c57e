-- The end of a request under budgets (gateway.budgets): its reservations given back and what it
-- used settled, in each budget's window it was admitted in. Composed after ledger.lua.
-- KEYS: the budgets' ready marker, each budget's window hash, the ledger (with the request).
-- ARGV: the worst case reserved, the tokens to settle, the prefix of the reaped requests' marks,
-- the budgets' reaped hash.
-- The spend is persisted before this runs (BudgetSpend); a Redis that restarted empty and is not
-- rebuilt yet takes nothing (-1: the caller keeps it and sends it again after the rebuild, which
-- may count it twice, never less). A window's hash that is gone (rebuilt without it, or a past
-- window that expired) is not created again: its spend is in the database.
-- A request the reaper settled at its worst case (its replica's lease lapsed while it ran,
-- reap.lua) has nothing left to give back and its worst case counted already: only what it used
-- beyond that is added, and what its persisted spend holds twice is noted (negative) in the
-- reaped hash, so that the database too ends at the worst case once (budgets.rebuild). Its mark
-- turns 'settled': the same settle sent again changes nothing.
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local worst, used = tonumber(ARGV[1]), tonumber(ARGV[2])
local mark = ARGV[3] and redis.call('GET', ARGV[3] .. KEYS[#KEYS])
if mark == 'settled' then return 0 end
for i = 2, #KEYS - 1 do
  local key = KEYS[i]
  local add = used
  if mark == 'reaped' then
    add = math.max(0, used - worst)
    if math.min(used, worst) > 0 then redis.call('HINCRBY', ARGV[4], key, -math.min(used, worst)) end
  else
    local field = request .. '\n' .. key .. '\nreserved'
    local held = math.min(worst, tonumber(redis.call('HGET', ledger, field) or '0'))
    if held > 0 then
      redis.call('HDEL', ledger, field)
      redis.call('HINCRBY', key, 'reserved', -held)
    end
  end
  if redis.call('EXISTS', key) == 1 and add > 0 then
    redis.call('HINCRBY', key, 'used', add)
  end
end
if mark == 'reaped' then redis.call('SET', ARGV[3] .. KEYS[#KEYS], 'settled', 'KEEPTTL') end
return 0
