-- break: KEYS[1] lock; ARGV[1] channel, ARGV[2] PUBLISH or SPUBLISH
-- Remove the lock whoever holds it and wake the waiters (an operator's last
-- resort). Returns the fence of the lock removed, or 0 if it was free.
local fence = redis.call('HGET', KEYS[1], 'fence')
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call(ARGV[2], ARGV[1], 'r')
  return tonumber(fence) or 0
end
return 0
