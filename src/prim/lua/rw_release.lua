-- release: KEYS[1] the one key `token` may be in (see rw_acquire.lua): the
-- writer (a hash), the readers (a sorted set) or the "writer waiting"
-- marker; ARGV[1] token, ARGV[2] channel, ARGV[3] 'w', 'r' or 'm' (which of
-- the three KEYS[1] is; 'd': the writer, never handed over), ARGV[4]
-- PUBLISH or SPUBLISH (absent: tell nobody).
-- Remove the writer, the reader or the marker `token`, only if it is still
-- there: 1 for a writer or reader removed, else 0 (its lease ran out, or an
-- earlier send of this same release removed it); or 2, leaving the writer
-- as it is, when a starving writer may wait in the queue (q, see
-- _lock_rw.lua): rwlock.c then sends rw_handover.lua, which names the
-- queue's keys too and hands the lock to its first live place. 'd' is sent
-- when that was answered TRYAGAIN (the slot is half moved): the next
-- starving try, woken by the message, hands the lock on in order.
-- One key only, as the renewal: while the name's slot migrates, a script
-- whose declared keys are partly missing is answered TRYAGAIN until the
-- slot has moved (and the hold's lease may run out meanwhile), while one
-- key follows ASK (see rwlock.c).
-- The waiters are told when the kind of hold released is gone (the last
-- reader's leaving is what a writer waits for; readers leaving among others
-- free nothing for anyone), and when a marker went (readers held off by it
-- may come in). The other kind's key is not read: if it holds, the waiters
-- told try once and are refused.
-- KEYS[1] is never touched again once a command may have deleted it: on a
-- node whose slot is MIGRATING, Redis sends a command on a missing key
-- elsewhere (ASK), which inside a script is an error ("Script attempted to
-- access a non local key") raised after the delete took effect. What is
-- left is counted from what was read before.
local ours = 0
local told = false
if ARGV[3] == 'w' or ARGV[3] == 'd' then
  local held = redis.call('HMGET', KEYS[1], 'token', 'q')
  local holder = held[1]
  if holder == ARGV[1] then
    if held[2] == '1' and ARGV[3] == 'w' and ARGV[4] then return 2 end
    redis.call('DEL', KEYS[1])
    ours = 1
  end
  told = ours == 1 or not holder
elseif ARGV[3] == 'r' then
  local t = redis.call('TIME')
  local left = redis.call('ZCARD', KEYS[1])
  left = left - redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
  if left > 0 then
    ours = redis.call('ZREM', KEYS[1], ARGV[1])
    left = left - ours
  end
  told = left == 0
elseif redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  told = true
end
if ARGV[4] and told then
  redis.call(ARGV[4], ARGV[2], 'r')
end
return ours
