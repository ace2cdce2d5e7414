-- release: KEYS[1] lock, KEYS[2] queue, KEYS[3] processes, KEYS[4] fence
-- (as in _queue.lua; the lock as in _lock_hash.lua); ARGV[1] token,
-- ARGV[2] fence_ttl_s, ARGV[3] the name's channel, ARGV[4] PUBLISH or
-- SPUBLISH (absent: tell nobody, for Redlock's undo of a try short of a
-- quorum; nobody starves there).
-- Our lock: when a wait starves (q), hand it to the first live entry of
-- the queue by message (the lock is overwritten for it, its fence is the
-- last one); else, or when nobody is left there, delete it and tell the
-- waiters on the channel ('r'): the first try to come takes it. Returns 1
-- if it was ours, 0 if not (expired, taken over, or already released by
-- an earlier try of this same release). A wait that leaves (its try may
-- have given it a place) takes its place off the queue.
-- A lock that is not there at all is free: say so too. Its waiters may be
-- sleeping until a PTTL that no longer holds (the key expired early, or a
-- failover promoted a replica that never had it).
-- The channel is an argument, not a key: in a cluster, a key that never
-- exists would make the script answer TRYAGAIN for as long as its slot
-- migrates. The queue may be missing beside the lock, so this script is
-- answered TRYAGAIN while the slot is half moved: mutex.c then sends
-- mutex_release_lock.lua, on the lock alone.
-- The common case first, before the included code: a Lua chunk makes
-- its functions anew at every call, and a release with nobody starving
-- needs none of them.
local held = redis.call('HMGET', KEYS[1], 'token', 'fence', 'q')
if held[1] == ARGV[1] and (held[3] ~= '1' or not ARGV[4]) then
  redis.call('DEL', KEYS[1])
  if ARGV[4] then redis.call(ARGV[4], ARGV[3], 'r') end
  return 1
end
if not ARGV[4] then return 0 end
-- #include "_fence.lua"
-- #include "_queue.lua"
-- #include "_lock_hash.lua"
if held[1] == ARGV[1] then
  queue_clock()
  local head, claim = pop_live()
  if head then
    grant_by_message(head, claim, ARGV[2], ARGV[3], ARGV[4], tonumber(held[2]), ARGV[1])
    return 1
  end
  redis.pcall('DEL', KEYS[3]) -- (see lock.set)
  redis.call('DEL', KEYS[1])
  redis.call(ARGV[4], ARGV[3], 'r')
  return 1
end
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 and redis.pcall('EXISTS', KEYS[2]) == 0 then
  redis.pcall('DEL', KEYS[3]) -- the last place left
end
if held[1] == false then redis.call(ARGV[4], ARGV[3], 'r') end
return 0
