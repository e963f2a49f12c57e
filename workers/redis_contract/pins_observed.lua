-- An engine's pinned set set to what the engine reports.
-- KEYS: pinned set. ARGV: now, the names the engine reports pinned... Names no longer pinned go;
-- names missing come in with `now` (a pin of unknown age counts as new: held from now on).
local keep = {}
for i = 2, #ARGV do keep[ARGV[i]] = true end
for _, name in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if not keep[name] then redis.call('ZREM', KEYS[1], name) end
end
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], 'NX', ARGV[1], ARGV[i]) end
return 0
