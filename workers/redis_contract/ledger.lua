-- The replica's ledger and the request, from the last KEYS entry: `<ledger key>#<request>`.
local ledger, request = string.match(KEYS[#KEYS], '^(.*)#([^#]*)$')
-- The request's lane on its engine ('live', 'background'), from ARGV's last three entries
-- (admission.lua); '' when the caller counts no lane.
local function lane_of(argv)
  local lane = argv[#argv - 2]
  if lane == 'live' or lane == 'background' then return lane end
  return ''
end
