-- renew (and claim): KEYS[1] lock, KEYS[2] processes (the claim only);
-- ARGV[1] token, ARGV[2] lease_ms
-- Extend the lease only if the lock is still ours. The first renewal of a
-- grant by message claims it (its short claim window becomes the lease),
-- and gives our process back its time in the queue, which the grant cut
-- to that window. Later renewals name the lock only (see fair.c's
-- claim_cmd). Returns 1 or 0.
-- #include "_fence.lua"
-- #include "_queue.lua"
-- #include "_lock_str.lua"
queue_clock()
if lock.holder() ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if KEYS[2] then alive(KEYS[2], ARGV[1]) end
return 1
