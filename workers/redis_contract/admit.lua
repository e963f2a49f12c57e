-- admit(inflight, pinned, name, max_loras): count one more request for `name` on the engine,
-- unless it would be one distinct unpinned version too many (false, nothing counted).
-- Composed after distinct_unpinned.lua.
local function admit(inflight, pinned, name, max_loras)
  local current = tonumber(redis.call('HGET', inflight, name) or '0')
  local pins = redis.call('ZCARD', pinned)
  if current > 0 or pins == 0 or redis.call('ZSCORE', pinned, name) then
    redis.call('HINCRBY', inflight, name, 1)
    return true
  end
  if distinct_unpinned(inflight, pinned, name) < math.max(1, max_loras - pins) then
    redis.call('HINCRBY', inflight, name, 1)
    return true
  end
  return false
end
