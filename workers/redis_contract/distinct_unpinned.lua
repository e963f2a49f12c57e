-- distinct_unpinned(inflight, pinned, except): how many versions other than `except` have
-- requests in the engine's in-flight hash and are not in its pinned set.
local function distinct_unpinned(inflight, pinned, except)
  local fields = redis.call('HGETALL', inflight)
  local distinct = 0
  for i = 1, #fields, 2 do
    local name = fields[i]
    if name ~= except and tonumber(fields[i + 1]) > 0
        and not redis.call('ZSCORE', pinned, name) then
      distinct = distinct + 1
    end
  end
  return distinct
end
