-- renew many: KEYS[i] lock i; ARGV[2i-1] its token, ARGV[2i] its lease_ms.
-- The renewal of each lock, as mutex_renew.lua does it (never over
-- Redlock, so without its fence), in one call: the keys share a slot.
-- Returns a string of one character per key: "1" where the lease was
-- extended, "2" where it was and a revoke asks its holder to release it
-- (mutex_revoke.lua), "0" where the lock is no longer that token's (one
-- reply, not an array of integers: cheaper for Redis to write and the
-- client to read).
-- The locks are read by one MGET (a key that is not a string, an older
-- hilock's hash, reads as nil: not ours), and each is then only compared:
-- its token alone, or its token, a space and its marks (_mutex_value.lua).
-- One PEXPIRE per lock that is still ours is the rest, and the least a
-- hold with a lease of its own can cost.
local call, keys, argv, find, sub = redis.call, KEYS, ARGV, string.find, string.sub
local held = call('MGET', unpack(keys))
local out = {}
for i = 1, #keys do
  local v, token, r = held[i], argv[2 * i - 1], '0'
  if v == token then
    r = '1'
  elseif v and sub(v, #token + 1, #token + 1) == ' ' and sub(v, 1, #token) == token then
    r = find(v, 'v', #token + 2, true) and '2' or '1'
  end
  if r ~= '0' then call('PEXPIRE', keys[i], argv[2 * i]) end
  out[i] = r
end
return table.concat(out)
