-- acquire: KEYS[1] lock, KEYS[2] fence (same hash tag: same slot);
-- ARGV[1] token, ARGV[2] lease_ms, ARGV[3] fence_ttl_s
-- Free: take it with a new fencing token -> the fence (an integer).
-- Ours already (a retry whose reply was lost): refresh -> the same fence.
-- Held by another: -> {0, pttl, its token} so the caller can sleep until it
-- may expire (Redlock: and tell a holder of a quorum from a split vote),
-- and mark the lock (w): its release tells the waiters. A release with
-- nobody marked publishes nothing.
--
-- The fence is next_fence's (_fence.lua): one INCR of the fence key, with
-- no clock and no TTL to write while that key lives.
--
-- Both keys are declared, so that no acquire writes a fence key on the
-- importing node of a migrating slot while the old one is still on the
-- migrating node: MIGRATE of the old one would then fail (BUSYKEY) and stop
-- `redis-cli --cluster reshard`, and the fences would lose their history.
-- While the slot migrates, Redis answers TRYAGAIN to a try whose keys are
-- partly on each side or missing on the importing node (the caller retries
-- until the slot has moved); release and renew declare only the lock and
-- follow ASK throughout, so holds are never stalled.
-- #include "_fence.lua"
local held = redis.call('HMGET', KEYS[1], 'token', 'fence', 'w')
if held[1] == false then
  local fence = next_fence(KEYS[2], ARGV[3])
  redis.call('HSET', KEYS[1], 'token', ARGV[1], 'fence', fence)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return fence
end
if held[1] == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(held[2])
end
-- (A pcall: a server out of memory refuses the mark, and the wait goes on
-- unmarked, woken at the lease's end, as the try's answer says.)
if held[3] == false then redis.pcall('HSET', KEYS[1], 'w', 1) end
return {0, redis.call('PTTL', KEYS[1]), held[1]}
