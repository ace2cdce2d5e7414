-- release: KEYS[1] lock, KEYS[2] channel; ARGV[1] token
-- Delete the lock only if it is still ours, and tell the waiters on the
-- channel. Returns 1 if it was ours, 0 if not (expired, taken over, or
-- already released by an earlier try of this same release).
if redis.call('HGET', KEYS[1], 'token') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', KEYS[2], 'r')
  return 1
end
return 0
