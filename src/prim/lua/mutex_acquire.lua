-- acquire: KEYS[1] lock, KEYS[2] fence (same hash tag: same slot);
-- ARGV[1] token, ARGV[2] lease_ms, ARGV[3] fence_ttl_s
-- Free: take it with a new fencing token -> {1, fence}.
-- Ours already (a retry whose reply was lost): refresh -> {1, same fence}.
-- Held by another: -> {0, pttl, its token} so the caller can sleep until it
-- may expire (Redlock: and tell a holder of a quorum from a split vote).
--
-- A fence is max(last + 1, server time in microseconds): see _fence.lua.
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
local held = redis.call('HMGET', KEYS[1], 'token', 'fence')
if held[1] == false then
  local t = redis.call('TIME')
  local fence, f = next_fence(KEYS[2], ARGV[3], tonumber(t[1]) * 1000000 + tonumber(t[2]))
  redis.call('HSET', KEYS[1], 'token', ARGV[1], 'fence', f)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, fence}
end
if held[1] == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(held[2])}
end
return {0, redis.call('PTTL', KEYS[1]), held[1]}
