-- renew: KEYS[1] lock; ARGV[1] token, ARGV[2] lease_ms[, ARGV[3] fence]
-- Extend the lease only if the lock is still ours. Returns 1, or 2 when
-- a revoke asks its holder to release it (the mark v, mutex_revoke.lua),
-- or 0.
-- Redlock passes the hold's fence: a master where the key is gone (it
-- restarted empty, or the key expired there alone) gets it back, but the
-- answer is still 0. Only the masters that kept the key count: if they
-- are a quorum, the hold never lapsed, so nobody else can have held the
-- lock meanwhile, and the key taken back counts from the next renewal on.
-- Never where another token holds it.
-- #include "_mutex_value.lua"
local held, marks = mutex_split(redis.pcall('GET', KEYS[1]))
if held == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if marks ~= '' and string.find(marks, 'v', 1, true) then return 2 end
  return 1
end
if held == false and ARGV[3] then
  redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
end
return 0
