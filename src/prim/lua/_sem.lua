-- The semaphore's holders and hash, for its tries (sem_acquire.lua,
-- sem_join.lua): HOLDERS (zset token -> expiry, server ms) and HASH ("n"
-- -> permits_total, "u" -> permits in use, "q" -> until when starving
-- waits have places in the queue (server ms), token -> "permits fence"),
-- set by the including script before it calls these.
local HOLDERS, HASH

-- Drop the holders whose lease ran out by `now` (and those without the
-- hash: their permits can no longer be counted, and their renewals fail).
local function sem_prune(now)
  local dead = redis.call('ZRANGEBYSCORE', HOLDERS, '-inf', now)
  for i = 1, #dead do
    local v = redis.call('HGET', HASH, dead[i])
    if v then
      redis.call('HINCRBY', HASH, 'u', -tonumber(string.match(v, '^%d+')))
      redis.call('HDEL', HASH, dead[i])
    end
    redis.call('ZREM', HOLDERS, dead[i])
  end
end

-- The count the holders use: false when nobody holds (the stored count is
-- forgotten, with whatever the hash had but the queue's mark), else it.
-- (A marked hash keeps the mark and loses the count: on a node whose slot
-- is MIGRATING, a key that the script deleted is an error to touch, and the
-- hash is written again. It has no holder's field then: the hash never
-- outlives the holders but as the mark alone, see sem_stretch.)
local function sem_stored()
  local stored = redis.call('EXISTS', HOLDERS) == 1 and redis.call('HGET', HASH, 'n')
  if not stored then
    redis.call('DEL', HOLDERS)
    if redis.call('HEXISTS', HASH, 'q') == 1 then
      redis.call('HDEL', HASH, 'n', 'u')
    else
      redis.call('DEL', HASH)
    end
  end
  return stored
end

-- Stretch both keys to the last lease. (The mark goes with the hash if
-- every holder's lease runs out unreleased: the next starving try marks
-- the semaphore again, within its second.)
local function sem_stretch()
  local last = redis.call('ZRANGE', HOLDERS, -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', HOLDERS, last[2])
  redis.call('PEXPIREAT', HASH, last[2])
end

-- `token` takes `want` permits of `total` for lease_ms, with a new fence.
local function sem_take(token, want, total, lease_ms, fence_key, fence_ttl_s, nowus, now)
  local fence, f = next_fence(fence_key, fence_ttl_s, nowus)
  redis.call('HSET', HASH, 'n', total, token, want .. ' ' .. f)
  redis.call('HINCRBY', HASH, 'u', want)
  redis.call('ZADD', HOLDERS, string.format('%.0f', now + tonumber(lease_ms)), token)
  sem_stretch()
  return fence
end
