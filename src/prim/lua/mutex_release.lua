-- release: KEYS[1] lock; ARGV[1] token, ARGV[2] channel, ARGV[3] 'h' (may
-- hand over), 't' (may hand over, and tell: the releasing client has
-- waits of this name, which wait for this message rather than try) or 'd'
-- (delete and tell: mutex_handover.lua was answered TRYAGAIN),
-- ARGV[4] PUBLISH or SPUBLISH (absent: tell nobody, for Redlock's undo of
-- a try short of a quorum; nobody starves there).
-- Delete the lock only if it is still ours, and tell the waiters on the
-- channel ('r') if a try found it taken (w, mutex_acquire.lua) or the
-- releasing client asks ('t', 'd'): the first try to come takes it. Else
-- nobody listens for this release, and nothing is published. Returns 1 if
-- it was ours, 0 if not (expired, taken over, or already released by an earlier try of
-- this same release), or 2, leaving the lock as it is, when a wait may
-- starve in the queue (q, see _lock_mutex.lua): mutex.c then sends
-- mutex_handover.lua, which names the queue's keys too and hands the lock
-- to its first live place. A release with nobody starving, the common
-- one, names the lock alone.
-- 'd' is sent when the slot is half moved, with the queue missing beside
-- the lock: the next starving try (woken by the message) hands the lock
-- on in order.
-- A lock that is not there at all is free: say so too. Its waiters may be
-- sleeping until a PTTL that no longer holds (the key expired early, or a
-- failover promoted a replica that never had it).
-- The channel is an argument, not a key: in a cluster, a key that never
-- exists would make the script answer TRYAGAIN for as long as its slot
-- migrates.
-- #include "_mutex_value.lua"
local held, marks = mutex_split(redis.pcall('GET', KEYS[1]))
if held == ARGV[1] then
  if marks ~= '' and string.find(marks, 'q', 1, true) and ARGV[3] ~= 'd' and ARGV[4] then return 2 end
  redis.call('DEL', KEYS[1])
  if ARGV[4] and (marks ~= '' or ARGV[3] ~= 'h') then redis.call(ARGV[4], ARGV[2], 'r') end
  return 1
end
if held == false and ARGV[4] then
  redis.call(ARGV[4], ARGV[2], 'r')
end
return 0
