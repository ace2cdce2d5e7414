-- release, on the lock's key alone: KEYS[1] lock; ARGV[1] token, ARGV[2]
-- channel, ARGV[3] PUBLISH or SPUBLISH.
-- Sent instead of mutex_release.lua when that was answered TRYAGAIN: the
-- name's slot is half moved, and the queue is missing beside the lock
-- (mutex.c). Delete the lock only if it is still ours, and tell the
-- waiters on the channel: the next starving try hands it on in order.
-- Returns 1 if it was ours, 0 if not (expired, taken over, or already
-- released by an earlier try of this same release).
-- A lock that is not there at all is free: say so too. Its waiters may be
-- sleeping until a PTTL that no longer holds (the key expired early, or a
-- failover promoted a replica that never had it).
-- The channel is an argument, not a key: in a cluster, a key that never
-- exists would make the script answer TRYAGAIN for as long as its slot
-- migrates.
local token = redis.call('HGET', KEYS[1], 'token')
if token == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[3] then redis.call(ARGV[3], ARGV[2], 'r') end
  return 1
end
if token == false and ARGV[3] then
  redis.call(ARGV[3], ARGV[2], 'r')
end
return 0
