-- acquire: KEYS[1] holders (zset token -> expiry, server ms), KEYS[2] hash
-- ("n" -> permits_total, "u" -> permits in use, token -> "permits fence"),
-- KEYS[3] fence (one hash tag: one slot); ARGV[1] token, ARGV[2] lease_ms,
-- ARGV[3] fence_ttl_s, ARGV[4] permits_total, ARGV[5] permits
-- Holders whose lease ran out (by the server's clock) are dropped first.
-- No holder left: the stored count is forgotten, and ARGV[4] becomes it.
-- Holders without the hash (deleted or evicted under them) are dropped too:
-- their permits can no longer be counted, and their renewals fail.
-- A count that differs from the holders' -> {-1, their count}.
-- Ours already (a retry whose reply was lost): refresh -> {1, same fence, free}.
-- Enough permits free: take them with a new fence -> {1, fence, free after}.
-- Else -> {0, ms until the earliest lease runs out, free}.
-- A fence is max(last + 1, server time in microseconds), as the mutex's.
-- Every key is declared (see mutex_acquire.lua: slot migrations).
-- #include "_fence.lua"
local t = redis.call('TIME')
local nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(nowus / 1000)
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for i = 1, #dead do
  local v = redis.call('HGET', KEYS[2], dead[i])
  if v then
    redis.call('HINCRBY', KEYS[2], 'u', -tonumber(string.match(v, '^%d+')))
    redis.call('HDEL', KEYS[2], dead[i])
  end
  redis.call('ZREM', KEYS[1], dead[i])
end
local total = tonumber(ARGV[4])
local want = tonumber(ARGV[5])
local stored = redis.call('EXISTS', KEYS[1]) == 1 and redis.call('HGET', KEYS[2], 'n')
if not stored then
  redis.call('DEL', KEYS[1], KEYS[2])
elseif tonumber(stored) ~= total then
  return {-1, tonumber(stored) or 0}
end
local used = tonumber(redis.call('HGET', KEYS[2], 'u') or '0') or 0
local expiry = string.format('%.0f', now + tonumber(ARGV[2]))
local function stretch()
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', KEYS[1], last[2])
  redis.call('PEXPIREAT', KEYS[2], last[2])
end
local mine = redis.call('HGET', KEYS[2], ARGV[1])
if mine then
  redis.call('ZADD', KEYS[1], expiry, ARGV[1])
  stretch()
  return {1, tonumber(string.match(mine, ' (%d+)$')), total - used}
end
if used + want > total then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, tonumber(first[2]) - now + 1, total - used}
end
local fence, f = next_fence(KEYS[3], ARGV[3], nowus)
redis.call('HSET', KEYS[2], 'n', ARGV[4], ARGV[1], ARGV[5] .. ' ' .. f)
redis.call('HINCRBY', KEYS[2], 'u', want)
redis.call('ZADD', KEYS[1], expiry, ARGV[1])
stretch()
return {1, fence, total - used - want}
