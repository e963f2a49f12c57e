-- A request the controller sends itself (a warm-up), counted as the gateway counts its own.
-- Composed after distinct_unpinned.lua and admit.lua.
-- KEYS: in-flight hash, pinned set. ARGV: served name, max_loras. 1 counted, 0 no room.
if admit(KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])) then return 1 end
return 0
