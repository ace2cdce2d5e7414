-- break: KEYS[1] lock; ARGV[1] channel, ARGV[2] PUBLISH or SPUBLISH
-- Remove the lock whoever holds it and wake the waiters (an operator's last
-- resort). Returns the fence of the lock removed, or 0 if it was free.
-- That fence is the fence key's value (the last one given), or 1 if that
-- key is gone (no fence given is ever 1: a counter that starts again
-- starts from the clock, _fence.lua). The fence key is read, not
-- declared: it shares the lock's slot, and while that slot migrates a
-- declared key that has already moved would make every break answer
-- TRYAGAIN. Read first, so that a refusal (an ACL without +get, or the
-- fence key alone moved on) writes nothing.
local fence = tonumber(redis.call('GET', KEYS[1] .. ':fence'))
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call(ARGV[2], ARGV[1], 'r')
  return fence or 1
end
return 0
