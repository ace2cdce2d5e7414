-- renew: KEYS[1] the hold's own key: the writer (a hash) for a write hold,
-- the readers (a sorted set) for a read hold (see rw_acquire.lua);
-- ARGV[1] token, ARGV[2] lease_ms, ARGV[3] 'w' or 'r'.
-- Extend the lease of the writer or the reader `token` only if it is still
-- there (a reader whose lease ran out is dropped, not revived). 1 or 0.
-- One key only: while the slot migrates, a script whose declared keys are
-- partly missing is answered TRYAGAIN until the slot has moved (and the
-- hold would run out), while one key follows ASK (see rwlock.c).
if ARGV[3] == 'w' then
  if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) == false then return 0 end
redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
return 1
