-- Budgets around the admission (gateway.limits, budgets.claims): a request is admitted only when
-- its worst case fits every budget that applies (tenant, API token, alias), and its worst case
-- is reserved against each of them in the same script as the other admission checks. Composed
-- after admission.lua is wrapped as `admission()` (scripts.py) and run inside ledger_enter.lua.
-- KEYS after admission's five: [6] the budgets' ready marker (set by the rebuild, budgets.rebuild),
-- [7 .. 6+n] each budget's window hash (`used`, `reserved`); the ledger stays last.
-- ARGV after admission's six: [7] n budgets (0: none, or counted already), [8] the request's worst
-- case in weighted tokens, [9 .. 8+n] each budget's tokens, [9+n .. 8+2n] when each window's hash
-- may expire (unix seconds, 0: never).
-- Returns admission's answer, with {5 over a budget, i, tokens left} or {6 budgets not rebuilt,
-- 0} before anything is counted; an admitted request's answer gets [3] the tightest budget
-- (1-based) and [4] what it has left after this reservation.
local n = tonumber(ARGV[7] or '0')
local worst = tonumber(ARGV[8] or '0')
local function left(i)
  local counts = redis.call('HMGET', KEYS[6 + i], 'used', 'reserved')
  return tonumber(ARGV[8 + i]) - tonumber(counts[1] or '0') - tonumber(counts[2] or '0')
end
if n > 0 then
  -- A Redis that restarted empty has lost every window's spend: refuse until it is rebuilt.
  if redis.call('EXISTS', KEYS[6]) == 0 then return {6, 0} end
  for i = 1, n do
    local room = left(i)
    if worst > room then return {5, i, math.max(0, room)} end
  end
end
local result = admission()
if n > 0 and (result[1] == 0 or result[1] == 3) then
  local tightest, least = 0, nil
  for i = 1, n do
    local key = KEYS[6 + i]
    redis.call('HINCRBY', key, 'reserved', worst)
    local expire_at = tonumber(ARGV[8 + n + i])
    if expire_at > 0 then redis.call('EXPIREAT', key, expire_at) end
    redis.call('HINCRBY', ledger, request .. '\n' .. key .. '\nreserved', worst)
    local room = left(i)
    if least == nil or room < least then tightest, least = i, room end
  end
  result[3], result[4] = tightest, least
end
return result
