-- The next fencing token of a primitive whose last one is kept in `key`
-- (for ttl_s seconds): max(last + 1, the server's time in microseconds).
-- The key then need not live for ever: when it is gone (expired after
-- fence_ttl_s unused, deleted, evicted, or lost in a restart without
-- persistence), the clock still yields a larger fence, as long as it has
-- not stepped back. Numbers stay exact: microseconds since 1970 are below
-- 2^53 until 2255. Returns the fence and its decimal text. `last`, if
-- given, is the last fence (read from the lock the caller releases), and
-- saves reading the key.
local function next_fence(key, ttl_s, nowus, last)
  last = last or tonumber(redis.call('GET', key) or '0') or 0
  local fence = nowus
  if last >= nowus then fence = last + 1 end
  local f = string.format('%.0f', fence) -- tostring would print 1.7e+15
  redis.call('SET', key, f, 'EX', ttl_s)
  return fence, f
end
