-- acquire of a starving reader (hilock_config.starve_ms): KEYS as
-- rw_join.lua's; ARGV as mutex_join.lua's, and its reply
-- (fair_acquire.lua's; flags has 4 with a grant: the next reader may try
-- at once).
-- A reader that starved (behind writers of other processes, which the
-- marker prefers) takes a place in the queue, as a starving writer does,
-- and goes in as soon as no writer holds and no live writer's place comes
-- before its own; a release that hands the lock to a reader's place lets
-- in the readers right behind it (_queue.lua). So a reader waits for the
-- writers queued before it, not for every writer that comes.
-- #include "_fence.lua"
-- #include "_queue.lua"
-- #include "_lock_rw.lua"
queue_clock()
local token = ARGV[1]
local lost = 0
if alive(KEYS[3], token) then lost = 2 end
local writer = redis.call('HMGET', KEYS[1], 'token', 'fence')
local renewed = redis.call('ZSCORE', KEYS[6], token) ~= false
if renewed or (not writer[1] and lock.readers_turn(token)) then
  local fence = lock.read_in(token, ARGV[2])
  return {1, fence, now, '', 0, 4 + lost + (renewed and 1 or 0)}
end
if ARGV[4] ~= '1' then join(token, ARGV[2], READER) end
redis.call('PEXPIRE', KEYS[2], ALIVE_MS)
lock.mark_waiting()
if writer[1] then
  return {0, redis.call('PTTL', KEYS[1]), now, writer[1], tonumber(writer[2]), lost}
end
return {0, 1000, now, '', 0, lost} -- readers hold, a writer's place comes first: its refresh
