-- renew many: KEYS[i] lock i; ARGV[2i-1] its token, ARGV[2i] its lease_ms.
-- The renewal of each lock, as mutex_renew.lua does it (never over
-- Redlock, so without its fence), in one call: the keys share a slot.
-- Returns an array: 1 where the lease was extended, 0 where the lock is
-- no longer that token's.
local out = {}
for i = 1, #KEYS do
  if redis.call('HGET', KEYS[i], 'token') == ARGV[2 * i - 1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
