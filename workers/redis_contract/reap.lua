-- A dead replica's holds given back. KEYS: the replicas' set. ARGV: the lease key prefix, the
-- ledger key prefix, the reaping replica's own id, the budgets' reaped hash, the prefix of the
-- reaped requests' marks. Counter keys come from the ledgers' fields (so not declared: one Redis
-- server, as every script here). Never lowers a count below zero. A budget's reservation (field
-- `reserved`) is not given back but settled at its worst case (the request may have run to its
-- end), noted in the reaped hash so that the spend is persisted too (budgets.rebuild), and the
-- request marked 'reaped': a replica whose lease lapsed while it was alive settles the request
-- later, and budget_settle.lua then adds nothing more than the worst case already counted.
local reaped = 0
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if id ~= ARGV[3] and redis.call('EXISTS', ARGV[1] .. id) == 0 then
    local ledger = ARGV[2] .. id
    local fields = redis.call('HGETALL', ledger)
    for i = 1, #fields, 2 do
      local head = string.find(fields[i], '\n', 1, true)
      local rest = string.sub(fields[i], head + 1)
      local n = tonumber(fields[i + 1])
      local cut = string.find(rest, '\n', 1, true)
      if cut then
        local key, field = string.sub(rest, 1, cut - 1), string.sub(rest, cut + 1)
        local have = tonumber(redis.call('HGET', key, field) or '0')
        if have - n <= 0 then redis.call('HDEL', key, field)
        else redis.call('HINCRBY', key, field, -n) end
        if field == 'reserved' and ARGV[4] then
          if redis.call('EXISTS', key) == 1 then redis.call('HINCRBY', key, 'used', n) end
          redis.call('HINCRBY', ARGV[4], key, n)
          if ARGV[5] then
            local mark = ARGV[5] .. ledger .. '#' .. string.sub(fields[i], 1, head - 1)
            redis.call('SET', mark, 'reaped', 'EX', REAPED_REQUEST_TTL)
          end
        end
      else
        local have = tonumber(redis.call('GET', rest) or '0')
        if math.min(n, have) > 0 then redis.call('DECRBY', rest, math.min(n, have)) end
      end
    end
    redis.call('DEL', ledger)
    redis.call('SREM', KEYS[1], id)
    reaped = reaped + 1
  end
end
return reaped
