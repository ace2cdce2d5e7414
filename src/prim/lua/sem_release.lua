-- release: KEYS[1] holders, KEYS[2] hash; ARGV[1] token, ARGV[2] channel,
-- ARGV[3] PUBLISH or SPUBLISH
-- Give back the permits of `token`. Returns 1 if it still had them, 0 if
-- not (its lease ran out by the server's clock, or an earlier send of this
-- same release gave them back): another token's permits are never touched.
-- Waiters are told either way: permits that ran out early are free too.
-- With no holder left, the stored count goes (the next acquirer sets it).
-- The channel is an argument, not a key (see mutex_release.lua).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
local ours = 0
if score ~= nil and score > now then ours = 1 end
local v = redis.call('HGET', KEYS[2], ARGV[1])
if v then
  redis.call('HINCRBY', KEYS[2], 'u', -tonumber(string.match(v, '^%d+')))
  redis.call('HDEL', KEYS[2], ARGV[1])
end
-- The holders' key is not read again after the ZREM that may delete it: on
-- a node whose slot is MIGRATING, a command on a missing key is sent
-- elsewhere (ASK), inside a script an error after the ZREM took effect.
-- The hash never empties here (it keeps 'u'). With no holder left it goes,
-- but for the starving waits' mark (q, see sem_join.lua), which stays as
-- long as it lasts (its other fields go: the hash is not deleted and
-- written again, which the same rule forbids).
local holders = redis.call('ZCARD', KEYS[1])
if holders - redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  local q = tonumber(redis.call('HGET', KEYS[2], 'q') or '0')
  if q > now then
    redis.call('HDEL', KEYS[2], 'n', 'u')
    redis.call('PEXPIREAT', KEYS[2], q)
  else
    redis.call('DEL', KEYS[2])
  end
end
if ARGV[3] then redis.call(ARGV[3], ARGV[2], 'r') end
return ours
