-- renew: KEYS[1] the election's lock; ARGV[1] token, ARGV[2] lease_ms
-- Extend the leader's lease only if `token` still leads. 1 or 0.
-- #include "_election.lua"
if leader_split(redis.call('GET', KEYS[1])) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
