-- renew (and claim): KEYS[1] lock, KEYS[2] processes; ARGV[1] token,
-- ARGV[2] lease_ms
-- Extend the lease only if the lock is still ours. The first renewal of a
-- grant by message claims it (its short claim window becomes the lease),
-- and every one keeps our process's queue entries alive. Returns 1 or 0.
-- #include "_fence.lua"
-- #include "_fair.lua"
if holder() ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
alive(KEYS[2], ARGV[1])
return 1
