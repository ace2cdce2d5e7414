-- The release of a lock that its release script found marked (a wait may
-- starve in the queue), and how a starving wait leaves its place (its
-- abandon): see mutex_handover.lua for its keys, arguments and reply.
-- Included last, after _queue.lua and the lock.
-- Our lock: hand it to the first live entry of the queue by message (the
-- lock is overwritten for it, its fence is the last one); when nobody is
-- left there, delete it and tell the waiters on the channel ('r').
-- Returns 1 if it was ours, else 0; not ours, `token` leaves the queue.
-- The queue may be missing beside the lock, so this script is answered
-- TRYAGAIN while the slot is half moved: the primitive then sends its
-- release with 'd', on the lock alone.
queue_clock()
local held, fence = lock.holder()
if held == ARGV[1] then
  local head, claim, kind = pop_live()
  if head then
    grant_by_message(head, claim, ARGV[2], ARGV[3], ARGV[4], fence, ARGV[1], kind)
    return 1
  end
  redis.pcall('DEL', KEYS[3]) -- (see lock.set)
  redis.call('DEL', KEYS[1])
  lock.drained(false)
  redis.call(ARGV[4], ARGV[3], 'r')
  return 1
end
-- The last place left: nobody starves now, and the lock's mark goes too,
-- so that its release frees it at once instead of asking for a handover
-- (and what the mark held off may come in: drained says whether to tell).
-- (The places are counted before the ZREM: on a node whose slot is
-- MIGRATING, a key that the script deleted is an error to touch.)
local tell = held == false
local places = redis.call('ZCARD', KEYS[2])
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 and places == 1 then
  redis.pcall('DEL', KEYS[3])
  if lock.drained(held) then tell = true end
end
if tell then redis.call(ARGV[4], ARGV[3], 'r') end
return 0
