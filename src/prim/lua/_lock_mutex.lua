-- The mutex's lock, for _queue.lua (included after it and after
-- _mutex_value.lua): a string, "TOKEN" or "TOKEN MARKS", with the lease as
-- its TTL (mutex_acquire.lua sets it, and marks it w when it finds it
-- taken; a grant here keeps w, so the grantee's release tells those
-- waiters). The mark q is there while the queue may hold a starving wait:
-- the release then hands the lock to the queue's first live entry instead
-- of freeing it, so a release with nobody starving reads the lock and
-- nothing else. Every waiting process listens on the name's one channel (a
-- release message is for them all), and so hears grants too; a grant names
-- its token, and the other processes leave it alone.
lock.per_client = false
local lock_value, lock_marks = false, '' -- as holder() read them

-- The lock's holder and its fence (the fence key's: the last one given),
-- or false when the lock is free. A hash is the hold of a hilock older
-- than 1.1 (see mutex_acquire.lua): it is waited for, not handed on, and
-- marked as that version's tries do (w), so its release wakes the waits.
function lock.holder()
  lock_value = redis.pcall('GET', KEYS[1])
  if type(lock_value) == 'table' then
    local v = redis.call('HMGET', KEYS[1], 'token', 'fence')
    return v[1] or '', tonumber(v[2]) or 0
  end
  local held, marks = mutex_split(lock_value)
  lock_marks = marks
  if not held then return false end
  return held, tonumber(redis.call('GET', KEYS[4])) or 0
end

-- The value of the lock read by holder(), with its marks `marks`.
local function lock_with(marks)
  local held = mutex_split(lock_value)
  if marks == '' then return held end
  return held .. ' ' .. marks
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
  local w = string.find(lock_marks, 'w', 1, true) and 'w' or ''
  local marks = w .. (q and 'q' or '')
  redis.call('SET', KEYS[1], marks == '' and token or token .. ' ' .. marks, 'PX', ms)
  if not q then redis.pcall('DEL', KEYS[3]) end -- nobody starves: no clients to count
  return fence, f
end

-- A wait joined, or kept, its place while the lock is held (holder() has
-- read it): its release must look at the queue.
function lock.mark_waiting()
  if type(lock_value) == 'table' then redis.pcall('HSET', KEYS[1], 'w', 1) return end
  if string.find(lock_marks, 'q', 1, true) then return end
  lock_marks = lock_marks .. 'q'
  redis.call('SET', KEYS[1], lock_with(lock_marks), 'KEEPTTL', 'XX')
end

-- The last place left the queue (`held`: the lock's holder, or false):
-- the lock's release need not look at the queue. Nothing else waits on
-- the mark: false, nobody to tell.
function lock.drained(held)
  if held and type(lock_value) == 'string' and string.find(lock_marks, 'q', 1, true) then
    lock_marks = string.gsub(lock_marks, 'q', '')
    redis.call('SET', KEYS[1], lock_with(lock_marks), 'KEEPTTL', 'XX')
  end
  return false
end
