-- acquire: KEYS[1] writer (hash: token, fence; TTL the writer's lease),
-- KEYS[2] readers (zset: token -> end of its lease, server ms), KEYS[3] the
-- last write fence, KEYS[4] the "writer waiting" marker (a writer's token);
-- one hash tag, one slot. ARGV[1] token, ARGV[2] lease_ms, ARGV[3]
-- fence_ttl_s, ARGV[4] 'r' (read) or 'w' followed by the marker's life in
-- ms (write; 'w0': leave no marker). A writer that waits for readers sleeps
-- at most 1000 ms between tries (rwlock.c's HL_RW_MARK_MS is 3000), so its
-- retries refresh its marker before the marker runs out.
-- Readers whose lease ran out (by the server's clock) are dropped first.
-- Returns {1, fence, 1} (read granted: more readers may come in at once),
-- {1, fence, 0} (write granted), {0, ms until it may be free}, or {0,
-- 1000, 1}: try again in a second to refresh the marker (the readers'
-- leases last longer).
--
-- Many readers or one writer. A writer that finds readers leaves the marker
-- (unless another writer's is there); while it exists, new readers are
-- refused (readers already in stay until they release or expire), so a
-- stream of readers cannot starve writers: the writer gets in when the
-- last reader leaves. The marker lives ARGV[5] ms (refreshed by each
-- retry), so a writer that died or gave up stops blocking readers then.
-- Writers of different processes do not race for long: a writer that
-- has waited hilock_config.starve_ms tries with rw_join.lua instead, which
-- queues it and sets the marker to 'q' (see _lock_rw.lua).
-- A retried try whose reply was lost finds its own token and is granted
-- again with the same fence (readers before the marker check).
-- A write fence is max(last + 1, server time in microseconds), as the
-- mutex's; a reader gets the last write fence (0 if none is kept).
-- #include "_fence.lua"
local t = redis.call('TIME')
local nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(nowus / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local function pttl(key)
  local ms = redis.call('PTTL', key)
  if ms < 0 then ms = tonumber(ARGV[2]) end -- no TTL: not ours, look after a lease
  return ms + 1
end
local function readers_stretch()
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', KEYS[2], last[2])
end
local writer = redis.call('HMGET', KEYS[1], 'token', 'fence')
if ARGV[4] == 'r' then
  local expiry = string.format('%.0f', now + tonumber(ARGV[2]))
  local fence = tonumber(redis.call('GET', KEYS[3]) or '0') or 0
  if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
    redis.call('ZADD', KEYS[2], expiry, ARGV[1])
    readers_stretch()
    return {1, fence, 1}
  end
  if writer[1] then return {0, pttl(KEYS[1])} end
  if redis.call('EXISTS', KEYS[4]) == 1 then return {0, pttl(KEYS[4])} end
  redis.call('ZADD', KEYS[2], expiry, ARGV[1])
  readers_stretch()
  return {1, fence, 1}
end
if writer[1] == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(writer[2]), 0}
end
if writer[1] then return {0, pttl(KEYS[1])} end
local mark = redis.call('GET', KEYS[4])
-- 'q': writers that starved wait in the queue (rw_join.lua), and the lock
-- goes to them in order; this writer joins them once it starves too.
if mark == 'q' then return {0, pttl(KEYS[4])} end
if redis.call('ZCARD', KEYS[2]) > 0 then
  local life = tonumber(string.sub(ARGV[4], 2))
  if life > 0 and (mark == false or mark == ARGV[1]) then
    redis.call('SET', KEYS[4], ARGV[1], 'PX', life)
  end
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  local ms = tonumber(last[2]) - now + 1
  if ms > 1000 then return {0, 1000, 1} end -- a refresh of the marker
  return {0, ms}
end
local fence, f = next_fence(KEYS[3], ARGV[3], nowus)
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'fence', f)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if mark == ARGV[1] then redis.call('DEL', KEYS[4]) end
return {1, fence, 0}
