-- hand over: KEYS[1] lock, KEYS[2] queue, KEYS[3] processes, KEYS[4]
-- fence (as in _queue.lua; the lock as in _lock_hash.lua); ARGV[1] token,
-- ARGV[2] fence_ttl_s, ARGV[3] the name's channel, ARGV[4] PUBLISH or
-- SPUBLISH.
-- The release of a lock that mutex_release.lua found marked (q: a wait
-- may starve), and how a starving wait leaves its place (its abandon).
-- Our lock: hand it to the first live entry of the queue by message (the
-- lock is overwritten for it, its fence is the last one); when nobody is
-- left there, delete it and tell the waiters on the channel ('r').
-- Returns 1 if it was ours, else 0; not ours, `token` leaves the queue.
-- The queue may be missing beside the lock, so this script is answered
-- TRYAGAIN while the slot is half moved: mutex.c then sends
-- mutex_release.lua with 'd', on the lock alone.
-- #include "_fence.lua"
-- #include "_queue.lua"
-- #include "_lock_hash.lua"
local held = redis.call('HMGET', KEYS[1], 'token', 'fence')
if held[1] == ARGV[1] then
  queue_clock()
  local head, claim = pop_live()
  if head then
    grant_by_message(head, claim, ARGV[2], ARGV[3], ARGV[4], tonumber(held[2]), ARGV[1])
    return 1
  end
  redis.pcall('DEL', KEYS[3]) -- (see lock.set)
  redis.call('DEL', KEYS[1])
  redis.call(ARGV[4], ARGV[3], 'r')
  return 1
end
-- The last place left: nobody starves now, and the lock's mark goes too,
-- so that its release frees it at once instead of asking for a handover.
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 and redis.pcall('EXISTS', KEYS[2]) == 0 then
  redis.pcall('DEL', KEYS[3])
  if held[1] then redis.call('HSET', KEYS[1], 'q', 0) end
end
if held[1] == false then redis.call(ARGV[4], ARGV[3], 'r') end
return 0
