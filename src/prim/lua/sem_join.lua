-- acquire of a starving wait (hilock_config.starve_ms): KEYS[1] holders,
-- KEYS[2] queue, KEYS[3] processes (as in _queue.lua), KEYS[4] fence,
-- KEYS[5] hash (as in sem_acquire.lua); ARGV[1] token, ARGV[2] lease_ms,
-- ARGV[3] fence_ttl_s, ARGV[4] '0' (takes or keeps its place) or '1' (try
-- once: no place), ARGV[5] permits_total, ARGV[6] permits. Replies as
-- sem_acquire.lua.
-- A wait that starved stops racing: it takes a place in the queue and
-- marks the hash (q, until ALIVE_MS from now), which refuses the tries of
-- waits that have not starved (sem_acquire.lua); it takes its permits when
-- its place is the first live one and they are free. Every release wakes
-- every waiting process (the name's channel), so the first place's next
-- try follows the release at once; a process has one place at a time (its
-- head's), so starving processes are served in turn.
-- #include "_fence.lua"
-- #include "_queue.lua"
-- #include "_sem.lua"
HOLDERS, HASH = KEYS[1], KEYS[5]
queue_clock()
local token = ARGV[1]
alive(KEYS[3], token)
sem_prune(now)
local total = tonumber(ARGV[5])
local want = tonumber(ARGV[6])

-- The queue after a place went: the mark lives while places are left. (A
-- hash with holders lives as long as they do, see sem_stretch; alone, it
-- is the mark's.)
local function places_left()
  if redis.pcall('EXISTS', KEYS[2]) == 1 then
    redis.call('HSET', HASH, 'q', now + ALIVE_MS)
    if redis.call('EXISTS', HOLDERS) == 0 then redis.call('PEXPIRE', HASH, ALIVE_MS) end
  else
    redis.call('HDEL', HASH, 'q')
    redis.pcall('DEL', KEYS[3])
  end
end

local stored = sem_stored()
if stored and tonumber(stored) ~= total then
  redis.call('ZREM', KEYS[2], token)
  places_left()
  return {-1, tonumber(stored) or 0}
end
local used = tonumber(redis.call('HGET', HASH, 'u') or '0') or 0
local mine = redis.call('HGET', HASH, token)
if mine then
  redis.call('ZADD', HOLDERS, string.format('%.0f', now + tonumber(ARGV[2])), token)
  sem_stretch()
  redis.call('ZREM', KEYS[2], token)
  places_left()
  return {1, tonumber(string.match(mine, ' (%d+)$')), total - used}
end
if ARGV[4] ~= '1' then join(token, ARGV[2]) end
local head = peek_live()
if (head == nil or head == token) and used + want <= total then
  local fence = sem_take(token, want, total, ARGV[2], KEYS[4], ARGV[3], nowus, now)
  redis.call('ZREM', KEYS[2], token)
  places_left()
  return {1, fence, total - used - want}
end
redis.call('PEXPIRE', KEYS[2], ALIVE_MS)
places_left()
local first = redis.call('ZRANGE', HOLDERS, 0, 0, 'WITHSCORES')
if first[2] == nil then return {0, 1000, total - used} end -- free, for a place before ours: its refresh
return {0, tonumber(first[2]) - now + 1, total - used}
