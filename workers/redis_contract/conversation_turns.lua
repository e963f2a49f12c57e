-- The conversation keys of chat requests, in the order they ended (gateway.conversations): for
-- each request, whether the messages it continues were seen (EXISTS), then its own messages' key
-- left for the turns after it (SET, with the TTL). One script for a batch, where a pipeline took
-- one command object per key on the gateway.
-- KEYS: every key, in order. ARGV[1]: the TTL in seconds; ARGV[2]: one letter per request: 'c'
-- it continues a key (the next KEYS entry), 'k' it has a key of its own (the next), 'b' both (the
-- continued key first), 'n' neither.
-- Returns one 0 or 1 per request: 1 when the messages it continues were seen.
local ttl, codes = tonumber(ARGV[1]), ARGV[2]
local seen, at = {}, 1
for i = 1, #codes do
  local code = string.sub(codes, i, i)
  local found = 0
  if code == 'c' or code == 'b' then
    found = redis.call('EXISTS', KEYS[at])
    at = at + 1
  end
  if code == 'k' or code == 'b' then
    redis.call('SET', KEYS[at], 1, 'EX', ttl)
    at = at + 1
  end
  seen[i] = found
end
return seen
