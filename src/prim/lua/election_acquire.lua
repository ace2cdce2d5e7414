-- campaign: KEYS[1] the election's lock, KEYS[2] its fence; ARGV[1] token,
-- ARGV[2] lease_ms, ARGV[3] fence_ttl_s, ARGV[4] value, ARGV[5] channel,
-- ARGV[6] PUBLISH or SPUBLISH
-- No leader: this token leads, with the next fence as its epoch, and the
-- channel hears "l EPOCH LEASE_MS VALUE" (the observers learn the new
-- leader from the message itself, in order) -> the epoch.
-- Ours already (a retry whose reply was lost): its lease refreshed -> its
-- epoch. Another leads: -> {0, pttl, its token}, so the campaign sleeps
-- until its lease may end, unless a release ("r") or a new leader ("l")
-- wakes it first.
-- #include "_fence.lua"
-- #include "_election.lua"
local held, epoch = leader_split(redis.call('GET', KEYS[1]))
if not held then
  local fence, f = next_fence(KEYS[2], ARGV[3])
  redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. f .. ' ' .. ARGV[4], 'PX', ARGV[2])
  redis.call(ARGV[6], ARGV[5], 'l ' .. f .. ' ' .. ARGV[2] .. ' ' .. ARGV[4])
  return fence
end
if held == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(epoch)
end
return {0, redis.call('PTTL', KEYS[1]), held}
