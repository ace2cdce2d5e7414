-- release: KEYS as in _queue.lua (lock, queue, processes, fence);
-- ARGV[1] token, ARGV[2] fence_ttl_s, ARGV[3] the channel of grants
-- without a client's id (as fair_acquire.lua's ARGV[5]), ARGV[4] PUBLISH or
-- SPUBLISH.
-- The holder's release, or a waiter leaving (cancelled, timed out, or
-- served by its owner's grant): `token` leaves the queue, and the lock,
-- if `token` holds it. A lock that is free now (released, or expired: a
-- grant that was never claimed) goes to the first live waiter at once, by
-- message. Returns 1 if `token` held the lock, else 0.
-- #include "_fence.lua"
-- #include "_queue.lua"
-- #include "_lock_str.lua"
queue_clock()
-- This script is the handoff: every Redis call in it is on the path from
-- the holder's release to the next holder's callback, so it makes few
-- (the lock is overwritten for the next holder, not deleted, and
-- its fence is the last one). A holder is never in the queue (the grant
-- took it off).
local token = ARGV[1]
local held, fence = lock.holder()
if held == token then
  local head, claim = pop_live()
  if head then
    grant_by_message(head, claim, ARGV[2], ARGV[3], ARGV[4], fence, token)
  else
    still_alive(KEYS[3], token)
    redis.call('DEL', KEYS[1])
  end
  return 1
end
redis.call('ZREM', KEYS[2], token)
if held == false then grant_next(ARGV[2], ARGV[3], ARGV[4]) end
return 0
