-- The read-write lock's write lock, for _queue.lua (included after it):
-- KEYS[1] the writer, a hash {token, fence, q} (q is 1 while a starving
-- writer may wait in the queue: its release then hands the lock on);
-- KEYS[5] the "writer waiting" marker, KEYS[6] the readers (see
-- rw_acquire.lua). Starving readers have places too (READER): a grant to
-- one lets in the readers right behind it (_queue.lua), and a starving
-- reader goes in at once while no writer holds and no live writer's
-- place comes before its own (rw_read_join.lua): readers wait for the
-- writers queued before them, writers for the readers before them.
-- While the queue holds a place, the marker says 'q' (MARK): new readers
-- that have not starved are refused, as for any waiting writer, and so
-- are the tries of writers that have not starved (rw_acquire.lua), so a
-- lock freed by its holder or its last reader goes to the queue in order.
-- The marker lives ALIVE_MS from the last starving try or grant: once
-- every starving process is gone, it runs out with their places.
lock.per_client = false
local MARK = 'q'

-- The writer and its fence; '' and 0 while readers hold; or false.
-- (The readers are counted before the expired ones go: on a node whose
-- slot is MIGRATING, a key that the script deleted is an error to touch.)
function lock.holder()
  local v = redis.call('HMGET', KEYS[1], 'token', 'fence')
  if v[1] then return v[1], tonumber(v[2]) end
  local readers = redis.call('ZCARD', KEYS[6])
  if readers == 0 then return false end
  if redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now) < readers then return '', 0 end
  return false
end

-- Until the writer's lease ends, or the last reader's (at most a second:
-- a later try refreshes the marker and the place).
function lock.pttl()
  if redis.call('EXISTS', KEYS[1]) == 1 then return redis.call('PTTL', KEYS[1]) end
  local last = redis.call('ZRANGE', KEYS[6], -1, -1, 'WITHSCORES')
  return math.min(tonumber(last[2]) - now, 1000)
end

-- The marker goes if it is the queue's. Returns true if it went.
local function unmark()
  if redis.pcall('GET', KEYS[5]) ~= MARK then return false end
  redis.call('DEL', KEYS[5])
  return true
end

-- `token` reads for ms more (its lease, or a claim window). Returns the
-- last write fence, as a number and as stored.
function lock.read(token, ms)
  redis.call('ZADD', KEYS[6], string.format('%.0f', now + tonumber(ms)), token)
  local last = redis.call('ZRANGE', KEYS[6], -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', KEYS[6], last[2])
  local f = redis.pcall('GET', KEYS[4])
  if type(f) ~= 'string' then f = '0' end
  return tonumber(f) or 0, f
end

-- The queue's state after a place went: marked while places are left,
-- else its clients and the marker go.
local function queue_left()
  local q = redis.pcall('EXISTS', KEYS[2]) == 1
  if q then
    redis.call('SET', KEYS[5], MARK, 'PX', ALIVE_MS)
  else
    redis.pcall('DEL', KEYS[3]) -- nobody starves: no clients to count
    unmark()
  end
  return q
end

-- Give the write lock to `token` (the lock is free of readers), for ms
-- (`last`: the fence of the lock being released, if any); or, for a
-- reader's place (`kind` READER), let it read.
function lock.set(token, ms, fence_ttl_s, last, kind)
  if kind == READER then -- (the writer releasing, if any, goes)
    redis.call('DEL', KEYS[1])
    local fence, f = lock.read(token, ms)
    queue_left()
    return fence, f
  end
  local fence, f = next_fence(KEYS[4], fence_ttl_s, nowus, last)
  local q = queue_left()
  redis.call('HSET', KEYS[1], 'token', token, 'fence', f, 'q', q and 1 or 0)
  redis.call('PEXPIRE', KEYS[1], ms)
  return fence, f
end

-- May starving reader `token` go in, no writer holding? Not while a live
-- writer's place comes before its own (before every place, if it has
-- none).
-- (The places are few, one per waiting process: read in one ZRANGE, with
-- the commands of the documented ACL rule only.)
function lock.readers_turn(token)
  local places = redis.pcall('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
  if type(places) ~= 'table' then return true end
  for i = 1, #places, 2 do
    if places[i] == token then return true end
    local _, kind = place_of(places[i + 1])
    if kind ~= READER then
      local until_ms = tonumber(redis.call('ZSCORE', KEYS[3], client_of(places[i])))
      if until_ms and until_ms > now then return false end
    end
  end
  return true
end

-- Starving reader `token` goes in: it leaves its place, if it had one
-- (its try counted its client in all cases: queue_left tidies that up).
function lock.read_in(token, ms)
  local fence = lock.read(token, ms)
  redis.call('ZREM', KEYS[2], token)
  queue_left()
  return fence
end

-- A starving writer joined, or kept, its place while the lock is held:
-- the writer's release must look at the queue, and readers stay out.
function lock.mark_waiting()
  if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'q', 1) end
  redis.call('SET', KEYS[5], MARK, 'PX', ALIVE_MS)
end

-- The last place left the queue (`held`: the writer, '' for readers, or
-- false). Returns true if the marker went: the readers it held off are
-- told.
function lock.drained(held)
  if held and held ~= '' then redis.call('HSET', KEYS[1], 'q', 0) end
  return unmark()
end
