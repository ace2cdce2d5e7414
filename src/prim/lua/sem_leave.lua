-- leave: KEYS[1] hash, KEYS[2] queue, KEYS[3] processes (see sem_join.lua);
-- ARGV[1] token, ARGV[2] channel, ARGV[3] PUBLISH or SPUBLISH.
-- A starving wait that ends without its permits leaves its place; with
-- nobody left there, the hash's mark goes too. The waiters are told: the
-- places behind it, and the tries that the mark held off, may go now.
-- Returns 0.
-- (The places are counted before the ZREM: on a node whose slot is
-- MIGRATING, a key that the script deleted is an error to touch.)
local places = redis.call('ZCARD', KEYS[2])
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
  if places == 1 then
    redis.pcall('DEL', KEYS[3])
    redis.call('HDEL', KEYS[1], 'q')
  end
  if ARGV[3] then redis.call(ARGV[3], ARGV[2], 'r') end
end
return 0
