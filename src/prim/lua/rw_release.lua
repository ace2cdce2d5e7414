-- release: KEYS[1] writer, KEYS[2] readers, KEYS[3] marker (see
-- rw_acquire.lua); ARGV[1] token, ARGV[2] channel, ARGV[3] PUBLISH or
-- SPUBLISH (absent: tell nobody)
-- Remove the writer or the reader `token`, only if it is still there (a
-- reader's lease not run out): 1, else 0 (expired, or already released by
-- an earlier send of this same release). Tokens are unique, so the mode
-- need not be said. The marker of `token` goes too (a writer that gave up
-- waiting). The waiters are told when nobody holds the lock any more (the
-- last reader's leaving is what a writer waits for; readers leaving among
-- others free nothing for anyone), and when the marker went (readers held
-- off by it may come in).
local t = redis.call('TIME')
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local ours = 0
if redis.call('HGET', KEYS[1], 'token') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  ours = 1
else
  ours = redis.call('ZREM', KEYS[2], ARGV[1])
end
local unmarked = false
if redis.call('GET', KEYS[3]) == ARGV[1] then
  redis.call('DEL', KEYS[3])
  unmarked = true
end
if ARGV[3] and (unmarked or (redis.call('EXISTS', KEYS[1]) == 0 and redis.call('ZCARD', KEYS[2]) == 0)) then
  redis.call(ARGV[3], ARGV[2], 'r')
end
return ours
