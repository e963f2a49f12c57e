-- The replica's ledger and the request, from the last KEYS entry: `<ledger key>#<request>`.
local ledger, request = string.match(KEYS[#KEYS], '^(.*)#([^#]*)$')
