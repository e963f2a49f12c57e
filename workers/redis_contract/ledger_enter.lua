-- admission.lua wrapped, not edited, so that what it held is written in the replica's ledger
-- in the same script: its counts before and after say what it held (KEYS[2] tenant, KEYS[3]
-- version, KEYS[4] engine hash with field ARGV[5], and the engine's load hash with the request's
-- lane, admission.lua). Composed after ledger.lua; the admission
-- goes in place of the body placeholder below.
local function enter()
ENTER_BODY
end
local function count(key, field)
  if field then return tonumber(redis.call('HGET', key, field) or '0') end
  return tonumber(redis.call('GET', key) or '0')
end
local tenant0, conc0 = count(KEYS[2]), count(KEYS[3])
local engine0 = count(KEYS[4], ARGV[5])
local lane = lane_of(ARGV)  -- and the engine's load hash, KEYS[#KEYS - 1]
local load0 = lane ~= '' and count(KEYS[#KEYS - 1], lane) or 0
local class = lane == 'live' and class_of(ARGV) or ''
local class0 = class ~= '' and count(KEYS[#KEYS - 1], 'class:' .. class) or 0
local result = enter()
local held = {
  {KEYS[2], count(KEYS[2]) - tenant0},
  {KEYS[3], count(KEYS[3]) - conc0},
  {KEYS[4] .. '\n' .. ARGV[5], count(KEYS[4], ARGV[5]) - engine0},
}
if lane ~= '' then
  held[#held + 1] = {KEYS[#KEYS - 1] .. '\n' .. lane, count(KEYS[#KEYS - 1], lane) - load0}
end
if class ~= '' then
  local field = 'class:' .. class
  held[#held + 1] = {KEYS[#KEYS - 1] .. '\n' .. field, count(KEYS[#KEYS - 1], field) - class0}
end
for _, entry in ipairs(held) do
  if entry[2] > 0 then redis.call('HINCRBY', ledger, request .. '\n' .. entry[1], entry[2]) end
end
redis.call('EXPIRE', ledger, CONCURRENCY_TTL)
return result
