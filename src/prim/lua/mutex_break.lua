-- break: KEYS[1] lock, KEYS[2] channel
-- Remove the lock whoever holds it and wake the waiters (an operator's last
-- resort). Returns the fence of the lock removed, or 0 if it was free.
local fence = redis.call('HGET', KEYS[1], 'fence')
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call('PUBLISH', KEYS[2], 'r')
  return tonumber(fence) or 0
end
return 0
