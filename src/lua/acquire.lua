-- acquire: KEYS[1] lock, KEYS[2] fence; ARGV[1] token, ARGV[2] lease_ms
-- Free: take it with a new fencing token -> {1, fence}.
-- Ours already (a retry whose reply was lost): refresh -> {1, same fence}.
-- Held by another: -> {0, pttl} so the caller can sleep until it may expire.
local held = redis.call('HMGET', KEYS[1], 'token', 'fence')
if held[1] == false then
  local fence = redis.call('INCR', KEYS[2])
  redis.call('HSET', KEYS[1], 'token', ARGV[1], 'fence', fence)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, fence}
end
if held[1] == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(held[2])}
end
return {0, redis.call('PTTL', KEYS[1])}
