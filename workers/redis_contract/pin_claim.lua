-- Before the controller asks an engine to pin a version. Composed after distinct_unpinned.lua.
-- KEYS: in-flight hash, pinned set. ARGV: served name, max_loras, now.
-- 1: the name is in the set (added now, or already there); 0: no room (nothing written).
-- Room: the distinct unpinned versions in flight, other than the one being pinned, must fit in
-- the unpinned slots left after this pin: <= max_loras - (pins + 1).
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then return 1 end
local room = tonumber(ARGV[2]) - (redis.call('ZCARD', KEYS[2]) + 1)
if distinct_unpinned(KEYS[1], KEYS[2], ARGV[1]) > room then return 0 end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
return 1
