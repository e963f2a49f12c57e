-- The end of a request under budgets (gateway.budgets): its reservations given back and what it
-- used settled, in each budget's window it was admitted in. Composed after ledger.lua.
-- KEYS: the budgets' ready marker, each budget's window hash, the ledger (with the request).
-- ARGV: the worst case reserved, the tokens to settle.
-- The spend is persisted before this runs (BudgetSpend); a Redis that restarted empty and is not
-- rebuilt yet takes nothing (-1: the caller keeps it and sends it again after the rebuild, which
-- may count it twice, never less). A window's hash that is gone (rebuilt without it, or a past
-- window that expired) is not created again: its spend is in the database.
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local worst, used = tonumber(ARGV[1]), tonumber(ARGV[2])
for i = 2, #KEYS - 1 do
  local key = KEYS[i]
  local field = request .. '\n' .. key .. '\nreserved'
  local held = math.min(worst, tonumber(redis.call('HGET', ledger, field) or '0'))
  if held > 0 then
    redis.call('HDEL', ledger, field)
    redis.call('HINCRBY', key, 'reserved', -held)
  end
  if redis.call('EXISTS', key) == 1 and used > 0 then
    redis.call('HINCRBY', key, 'used', used)
  end
end
return 0
