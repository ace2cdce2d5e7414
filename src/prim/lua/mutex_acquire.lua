-- acquire: KEYS[1] lock, KEYS[2] fence (same hash tag: same slot);
-- ARGV[1] token, ARGV[2] lease_ms, ARGV[3] fence_ttl_s
-- Free: take it (SET NX PX: the lock as _mutex_value.lua says) with a new
-- fencing token -> the fence (an integer).
-- Ours already (a retry whose reply was lost): refresh -> the same fence
-- (the fence key's value: no fence was given since; a new one if the key
-- is gone).
-- Held by another: -> {0, pttl, its token} so the caller can sleep until it
-- may expire (Redlock: and tell a holder of a quorum from a split vote),
-- and mark the lock (w): its release tells the waiters. A release with
-- nobody marked publishes nothing.
--
-- The fence is next_fence's (_fence.lua): one INCR of the fence key, with
-- no clock and no TTL to write while that key lives (and no text: the
-- reply is the number).
--
-- Both keys are declared, so that no acquire writes a fence key on the
-- importing node of a migrating slot while the old one is still on the
-- migrating node: MIGRATE of the old one would then fail (BUSYKEY) and stop
-- `redis-cli --cluster reshard`, and the fences would lose their history.
-- While the slot migrates, Redis answers TRYAGAIN to a try whose keys are
-- partly on each side or missing on the importing node (the caller retries
-- until the slot has moved); release and renew declare only the lock and
-- follow ASK throughout, so holds are never stalled.
--
-- A hash in the lock's key is the hold of a hilock older than 1.1 (a
-- fleet being upgraded): it is waited for and marked as that version
-- does, so its release wakes this wait. (That version's tries fail with
-- WRONGTYPE on a lock of this one: never two holders.)
-- #include "_fence.lua"
-- #include "_mutex_value.lua"
-- (The SET is a pcall: a server out of memory refuses it before it looks
-- at the key. A free lock then answers with that error, HILOCK_EOOM; a
-- taken one is waited for, as on a server with room.)
local set = redis.pcall('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
if set and set.ok then
  local fence = redis.call('INCR', KEYS[2])
  if fence < 1e15 then fence = fence_restart(KEYS[2], ARGV[3]) end
  return fence
end
local v = redis.pcall('GET', KEYS[1])
local held, marks = mutex_split(v)
if held == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(redis.call('GET', KEYS[2])) or next_fence(KEYS[2], ARGV[3])
end
-- (A pcall: a server out of memory refuses the mark, and the wait goes on
-- unmarked, woken at the lease's end, as the try's answer says.)
if held then
  if not string.find(marks, 'w', 1, true) then
    redis.pcall('SET', KEYS[1], v .. (marks == '' and ' w' or 'w'), 'KEEPTTL', 'XX')
  end
elseif type(v) == 'table' then -- an older hilock's hash
  held = redis.call('HGET', KEYS[1], 'token')
  redis.pcall('HSET', KEYS[1], 'w', 1)
elseif set then
  return set -- refused (out of memory), on a free lock
end
return {0, redis.call('PTTL', KEYS[1]), held or ''}
