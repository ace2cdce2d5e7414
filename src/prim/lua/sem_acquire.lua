-- acquire: KEYS[1] holders (zset token -> expiry, server ms), KEYS[2] hash
-- ("n" -> permits_total, "u" -> permits in use, "q" -> until when starving
-- waits have places, token -> "permits fence"), KEYS[3] fence (one hash
-- tag: one slot); ARGV[1] token, ARGV[2] lease_ms, ARGV[3] fence_ttl_s,
-- ARGV[4] permits_total, ARGV[5] permits
-- Holders whose lease ran out (by the server's clock) are dropped first.
-- No holder left: the stored count is forgotten, and ARGV[4] becomes it.
-- Holders without the hash (deleted or evicted under them) are dropped too:
-- their permits can no longer be counted, and their renewals fail.
-- While waits that starved have places in the queue (q, sem_join.lua),
-- they come first: {0, ms until the mark may be gone, free}.
-- A count that differs from the holders' -> {-1, their count}.
-- Ours already (a retry whose reply was lost): refresh -> {1, same fence, free}.
-- Enough permits free: take them with a new fence -> {1, fence, free after}.
-- Else -> {0, ms until the earliest lease runs out, free}.
-- A fence is max(last + 1, server time in microseconds), as the mutex's.
-- Every key is declared (see mutex_acquire.lua: slot migrations).
-- #include "_fence.lua"
-- #include "_sem.lua"
HOLDERS, HASH = KEYS[1], KEYS[2]
local t = redis.call('TIME')
local nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(nowus / 1000)
sem_prune(now)
local total = tonumber(ARGV[4])
local want = tonumber(ARGV[5])
local q = tonumber(redis.call('HGET', HASH, 'q') or '0')
if q > now and redis.call('HEXISTS', HASH, ARGV[1]) == 0 then
  local used = tonumber(redis.call('HGET', HASH, 'u') or '0') or 0
  return {0, math.min(q - now, 1000), total - used}
end
local stored = sem_stored()
if stored and tonumber(stored) ~= total then
  return {-1, tonumber(stored) or 0}
end
local used = tonumber(redis.call('HGET', HASH, 'u') or '0') or 0
local mine = redis.call('HGET', HASH, ARGV[1])
if mine then
  redis.call('ZADD', HOLDERS, string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
  sem_stretch()
  return {1, tonumber(string.match(mine, ' (%d+)$')), total - used}
end
if used + want > total then
  local first = redis.call('ZRANGE', HOLDERS, 0, 0, 'WITHSCORES')
  return {0, tonumber(first[2]) - now + 1, total - used}
end
return {1, sem_take(ARGV[1], want, total, ARGV[2], KEYS[3], ARGV[3], nowus, now), total - used - want}
