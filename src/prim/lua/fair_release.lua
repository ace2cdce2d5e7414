-- release: KEYS as in _fair.lua (lock, queue, processes, fence);
-- ARGV[1] token, ARGV[2] fence_ttl_s, ARGV[3] channel, ARGV[4] PUBLISH or
-- SPUBLISH.
-- The holder's release, or a waiter leaving (cancelled, timed out, or
-- served by its owner's grant): `token` leaves the queue, and the lock,
-- if `token` holds it. A lock that is free now (released, or expired: a
-- grant that was never claimed) goes to the first live waiter at once, by
-- message. Returns 1 if `token` held the lock, else 0.
-- #include "_fence.lua"
-- #include "_fair.lua"
local token = ARGV[1]
redis.call('ZREM', KEYS[2], token)
local holder = redis.call('HGET', KEYS[1], 'token')
if holder == token then
  redis.call('DEL', KEYS[1])
  alive(KEYS[3], token)
elseif holder then
  return 0
end
grant_next(ARGV[2], ARGV[3], ARGV[4])
if holder == token then return 1 end
return 0
