-- leave: KEYS[1] the "writer waiting" marker, KEYS[2] queue, KEYS[3]
-- processes (see _lock_rw.lua); ARGV[1] token, ARGV[2] channel, ARGV[3]
-- PUBLISH or SPUBLISH.
-- A starving reader or writer that ends without the lock leaves its
-- place; with nobody left there, the queue's marker goes too. The waiters
-- are told: the places behind it, and the readers that the marker held
-- off, may go now. (The lock itself is not named: a write lock's mark, q,
-- left on it costs its release one handover that finds nobody. So while
-- the name's slot migrates, with the lock's and the readers' keys missing
-- beside these, the leave still runs.) Returns 0.
-- (The places are counted before the ZREM: on a node whose slot is
-- MIGRATING, a key that the script deleted is an error to touch.)
local places = redis.call('ZCARD', KEYS[2])
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
  if places == 1 then
    redis.pcall('DEL', KEYS[3])
    if redis.call('GET', KEYS[1]) == 'q' then redis.call('DEL', KEYS[1]) end
  end
  if ARGV[3] then redis.call(ARGV[3], ARGV[2], 'r') end
end
return 0
