-- renew: KEYS[1] lock; ARGV[1] token, ARGV[2] lease_ms
-- Extend the lease only if the lock is still ours. Returns 1 or 0.
if redis.call('HGET', KEYS[1], 'token') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
