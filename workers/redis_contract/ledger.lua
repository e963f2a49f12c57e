-- The replica's ledger and the request, from the last KEYS entry: `<ledger key>#<request>`.
local ledger, request = string.match(KEYS[#KEYS], '^(.*)#([^#]*)$')
-- The request's lane on its engine ('live', 'background'), from ARGV's last three entries
-- (admission.lua); '' when the caller counts no lane.
local function lane_of(argv)
  local lane = argv[#argv - 2]
  if lane == 'live' or lane == 'background' then return lane end
  return ''
end
-- The request's service class ('' none) and the classes' weights ('gold=6,silver=3,bronze=1'),
-- the two ARGV entries before the lane's three (admission.lua).
local function class_of(argv)
  local class = argv[#argv - 3]
  if type(class) == 'string' and string.match(class, '^[%w_-]+$') then return class end
  return ''
end
