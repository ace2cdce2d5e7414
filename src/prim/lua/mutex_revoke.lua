-- revoke: KEYS[1] lock; ARGV[1] channel, ARGV[2] PUBLISH or SPUBLISH
-- Ask the lock's holder to release it (hilock_revoke): mark the lock 'v'
-- (its holder's next renewal answers 2, so a holder that missed the
-- message still hears it) and tell the channel "v TOKEN" (a holder that
-- listens hears it at once). The holder decides. Returns the holder's
-- fence (the fence key's value; 1 if that key is gone), or 0 when nobody
-- holds the lock (nothing is written). A hash is the hold of a hilock
-- older than 1.1, which knows no revocation: 0, nothing written.
-- #include "_mutex_value.lua"
local v = redis.pcall('GET', KEYS[1])
local held, marks = mutex_split(v)
if not held then return 0 end
if not string.find(marks, 'v', 1, true) then
  redis.call('SET', KEYS[1], held .. ' ' .. marks .. 'v', 'KEEPTTL', 'XX')
end
redis.call(ARGV[2], ARGV[1], 'v ' .. held)
return tonumber(redis.call('GET', KEYS[1] .. ':fence')) or 1
