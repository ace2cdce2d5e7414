-- The next fencing token of a primitive whose last one is kept in `key`:
-- last + 1, by one INCR. A key that is gone (INCR made it 1: it expired
-- ttl_s after it was made, or was deleted, evicted, or lost in a restart
-- without persistence), or a counter far below the clock (0.2 counted
-- from 1, with no TTL), starts again from the server's time in
-- microseconds (`nowus`, if the caller has read it), and from `last`
-- + 1 if that is larger (`last`, if given: the fence of the lock the
-- caller hands over). That is larger than any fence the key gave while
-- the clock has not stepped back: fences grow by one per acquisition,
-- and a server runs far fewer than a million acquisitions a second, so
-- they never overtake the clock. Numbers stay exact: microseconds since
-- 1970 are below 2^53 until 2255. Returns the fence and its decimal text
-- (tostring would print 1.7e+15; a number passed to a command is sent
-- whole).
-- fence_restart is the part of it after the INCR: a caller that does
-- the INCR itself (mutex_acquire.lua, whose reply is the number) calls it
-- when the count is small.
local function fence_restart(key, ttl_s, nowus, last)
  if not nowus then
    local t = redis.call('TIME')
    nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  local fence = nowus
  if last and last >= fence then fence = last + 1 end
  redis.call('SET', key, fence, 'EX', ttl_s)
  return fence
end

local function next_fence(key, ttl_s, nowus, last)
  local fence = redis.call('INCR', key)
  if fence < 1e15 then -- 2001 in microseconds: not from the clock
    fence = fence_restart(key, ttl_s, nowus, last)
  end
  return fence, string.format('%.0f', fence)
end
