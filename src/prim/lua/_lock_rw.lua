-- The read-write lock's write lock, for _queue.lua (included after it):
-- KEYS[1] the writer, a hash {token, fence, q} as the mutex's
-- (_lock_hash.lua: q is 1 while a starving writer may wait in the queue);
-- KEYS[5] the "writer waiting" marker, KEYS[6] the readers (see
-- rw_acquire.lua). While the queue holds a starving writer, the marker
-- says 'q' (MARK): new readers are refused, as for any waiting writer,
-- and so are the tries of writers that have not starved (rw_acquire.lua),
-- so a lock freed by its holder or its last reader goes to the queue in
-- order. The marker lives ALIVE_MS from the last starving try or grant:
-- once every starving process is gone, it runs out with their places.
lock.per_client = false
local MARK = 'q'

-- The writer and its fence; '' and 0 while readers hold; or false.
-- (The readers are counted before the expired ones go: on a node whose
-- slot is MIGRATING, a key that the script deleted is an error to touch.)
function lock.holder()
  local v = redis.call('HMGET', KEYS[1], 'token', 'fence')
  if v[1] then return v[1], tonumber(v[2]) end
  local readers = redis.call('ZCARD', KEYS[6])
  if readers == 0 then return false end
  if redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now) < readers then return '', 0 end
  return false
end

-- Until the writer's lease ends, or the last reader's (at most a second:
-- a later try refreshes the marker and the place).
function lock.pttl()
  if redis.call('EXISTS', KEYS[1]) == 1 then return redis.call('PTTL', KEYS[1]) end
  local last = redis.call('ZRANGE', KEYS[6], -1, -1, 'WITHSCORES')
  return math.min(tonumber(last[2]) - now, 1000)
end

-- The marker goes if it is the queue's. Returns true if it went.
local function unmark()
  if redis.pcall('GET', KEYS[5]) ~= MARK then return false end
  redis.call('DEL', KEYS[5])
  return true
end

-- Give the write lock to `token` (the lock is free of readers), for ms
-- (`last`: the fence of the lock being released, if any).
function lock.set(token, ms, fence_ttl_s, last)
  local fence, f = next_fence(KEYS[4], fence_ttl_s, nowus, last)
  local q = redis.pcall('EXISTS', KEYS[2]) == 1
  redis.call('HSET', KEYS[1], 'token', token, 'fence', f, 'q', q and 1 or 0)
  redis.call('PEXPIRE', KEYS[1], ms)
  if q then
    redis.call('SET', KEYS[5], MARK, 'PX', ALIVE_MS)
  else
    redis.pcall('DEL', KEYS[3]) -- nobody starves: no clients to count
    unmark()
  end
  return fence, f
end

-- A starving writer joined, or kept, its place while the lock is held:
-- the writer's release must look at the queue, and readers stay out.
function lock.mark_waiting()
  if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'q', 1) end
  redis.call('SET', KEYS[5], MARK, 'PX', ALIVE_MS)
end

-- The last place left the queue (`held`: the writer, '' for readers, or
-- false). Returns true if the marker went: the readers it held off are
-- told.
function lock.drained(held)
  if held and held ~= '' then redis.call('HSET', KEYS[1], 'q', 0) end
  return unmark()
end
