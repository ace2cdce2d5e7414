-- The mutex's lock, for _queue.lua (included after it): a hash {token,
-- fence, q, w} with the lease as its TTL (mutex_acquire.lua writes token
-- and fence, and w when it finds the lock taken; a grant here keeps w, so
-- the grantee's release tells those waiters). q is 1 while the queue may
-- hold a starving wait: the release then hands the lock to the queue's
-- first live entry instead of freeing it, so a release with nobody
-- starving reads one field more and nothing else. Every waiting process listens on the name's one channel (a release
-- message is for them all), and so hears grants too; a grant names its
-- token, and the other processes leave it alone.
lock.per_client = false

-- The lock's holder and its fence, or false when the lock is free.
function lock.holder()
  local v = redis.call('HMGET', KEYS[1], 'token', 'fence')
  if not v[1] then return false end
  return v[1], tonumber(v[2])
end

-- Give the lock to `token`, for ms (`last`: the fence of the lock being
-- released, if any); q says whether anyone is left in the queue. (The
-- mutex reads no process's time but to skip its places: with the queue
-- empty, the clients' key goes too, and no key of a starving wait stays
-- behind its last grant.)
function lock.set(token, ms, fence_ttl_s, last)
  local fence, f = next_fence(KEYS[4], fence_ttl_s, nowus, last)
  -- (A pcall: on a node whose slot is MIGRATING, EXISTS of a key that
  -- the pop before deleted is an error, see pop_live.)
  local q = redis.pcall('EXISTS', KEYS[2]) == 1
  redis.call('HSET', KEYS[1], 'token', token, 'fence', f, 'q', q and 1 or 0)
  if not q then redis.pcall('DEL', KEYS[3]) end -- nobody starves: no clients to count
  redis.call('PEXPIRE', KEYS[1], ms)
  return fence, f
end

-- A wait joined, or kept, its place while the lock is held: its release
-- must look at the queue.
function lock.mark_waiting()
  redis.call('HSET', KEYS[1], 'q', 1)
end

-- The last place left the queue (`held`: the lock's holder, or false):
-- the lock's release need not look at the queue. Nothing else waits on
-- the mark: false, nobody to tell.
function lock.drained(held)
  if held then redis.call('HSET', KEYS[1], 'q', 0) end
  return false
end
