-- renew: KEYS[1] holders, KEYS[2] hash; ARGV[1] token, ARGV[2] lease_ms
-- Extend the lease of `token` only if it still holds its permits and its
-- lease has not run out by the server's clock (an expired holder's permits
-- may be someone else's already). Returns 1 or 0.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
if score == nil or score <= now or redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then
  return 0
end
redis.call('ZADD', KEYS[1], string.format('%.0f', now + tonumber(ARGV[2])), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
redis.call('PEXPIREAT', KEYS[2], last[2])
return 1
