-- leader: KEYS[1] the election's lock, KEYS[2] its fence
-- Who leads: {epoch, value, pttl, last}, or {0, '', 0, last} when nobody
-- does; `last` is the last epoch given (0: none), which tells an observer
-- whether this read is older than a message it has heard. Reads only.
-- #include "_election.lua"
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
local held, epoch, value = leader_split(redis.call('GET', KEYS[1]))
if not held then return {0, '', 0, last} end
return {tonumber(epoch), value, redis.call('PTTL', KEYS[1]), last}
