-- The queue of waits that the lock is handed to, in Redis: every wait of
-- the fair lock, and the waits that starve (hilock_config.starve_ms) of the
-- mutex, the read-write lock and the semaphore. Shared by their scripts
-- (see src/prim/fair.c, mutex.c, rwlock.c, semaphore.c),
-- each of which includes a lock after this file (_lock_str.lua, the fair
-- lock's; _lock_mutex.lua, the mutex's; _lock_rw.lua, the write lock's)
-- that fills `lock`: holder(), set(token, ms, fence_ttl_s, last),
-- mark_waiting() and per_client.
-- KEYS[1] the lock, KEYS[2] the queue (zset: token -> its place * 1024 +
-- its claim window, which is its lease, at most CLAIM_MS; or READER, a
-- reader's place: the write lock's readers, whose window is CLAIM_MS), KEYS[3] the
-- processes (zset: the first 16 hex digits of a token, which name its
-- client, -> until when its entries count, server ms), KEYS[4] the last
-- fence; one hash tag, one slot.
--
-- A queue entry lives as long as its process speaks: each try, claim or
-- release of the process on this name moves its time on to ALIVE_MS from
-- now (a process tries at least every 1000 ms while it has a place), so
-- entries of a process that died are skipped ALIVE_MS after its last
-- word, with no refresh per waiter. A grant by message lives for the
-- entry's claim window unless its process claims it (renews it to its
-- lease) or releases it; the grant also cuts the process's time to that
-- window, so the other entries of a process that died are skipped with
-- its first lapsed grant, not one by one.
local CLAIM_MS = 1000
local ALIVE_MS = 5000
local READER = 1023
local lock = {}
-- How long the lock is held for (ms; as PTTL: -2, free).
function lock.pttl() return redis.call('PTTL', KEYS[1]) end
local nowus, now

-- Read the server's clock (once, before the functions below run): a
-- script that may not need the queue calls it only when it does.
local function queue_clock()
  local t = redis.call('TIME')
  nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
  now = math.floor(nowus / 1000)
end

local function client_of(token) return string.sub(token, 1, 16) end

-- `token`'s process spoke: its entries count for ALIVE_MS more. Returns
-- true if it had no time left (it was silent too long, or the keys were
-- lost): its other entries may be gone, and it must join them again.
-- (ZADD is the first write: a server out of memory refuses a command
-- that may grow it only while a script has written nothing, and a try
-- under OOM must end with OOM, as the mutex's plain try does.)
local function alive(procs, token)
  local client = client_of(token)
  local was = tonumber(redis.call('ZSCORE', procs, client))
  redis.call('ZADD', procs, now + ALIVE_MS, client)
  redis.call('ZREMRANGEBYSCORE', procs, '-inf', now)
  redis.call('PEXPIRE', procs, ALIVE_MS)
  return was == nil or was <= now
end

-- Join the queue at its tail, unless there already (`kind`: READER for a
-- reader's place, else a holder's). Returns true if it joined.
local function join(token, lease_ms, kind)
  if redis.call('ZSCORE', KEYS[2], token) then return false end
  local last = tonumber(redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2] or '0')
  local claim = kind or math.min(tonumber(lease_ms), CLAIM_MS)
  redis.call('ZADD', KEYS[2], (math.floor(last / 1024) + 1) * 1024 + claim, token)
  return true
end

-- A place's claim window and kind, from its score.
local function place_of(score)
  local claim = tonumber(score) % 1024
  if claim == READER then return CLAIM_MS, READER end
  return claim
end

-- `token`'s process spoke, and has time left: it counts for ALIVE_MS more
-- (a grant cut it short). One call, for the release: the tries of a
-- process that waits prune the others and keep the key alive.
local function still_alive(procs, token)
  redis.call('ZADD', procs, 'XX', 'GT', now + ALIVE_MS, client_of(token))
end

-- The first entry whose process is alive, taken off the queue, its claim
-- window and its kind; entries of processes gone quiet are dropped on the
-- way.
-- nil: nobody waits. After a dead entry the queue may be gone (its last
-- entry popped), and on a node whose slot is MIGRATING a command on a
-- missing key is an error (Redis would send it elsewhere: ASK), raised
-- after the pops took effect: the next pops are pcalls, whose error means
-- nobody is left. (The first pop finds the key: a script runs there only
-- when every key it declares is there.)
-- (Each call names its command: an ACL refusal is explained by the
-- command on its line, net/req.c's script_call_at.)
local function pop_live()
  local head = redis.call('ZPOPMIN', KEYS[2])
  while head[1] ~= nil do
    local until_ms = tonumber(redis.call('ZSCORE', KEYS[3], client_of(head[1])))
    if until_ms and until_ms > now then return head[1], place_of(head[2]) end
    head = redis.pcall('ZPOPMIN', KEYS[2])
  end
  return nil
end

-- The first entry whose process is alive, left in the queue: as pop_live
-- returns it; entries of processes gone quiet are dropped on the way.
local function peek_live()
  while true do
    local head = redis.pcall('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    if type(head) ~= 'table' or head[1] == nil then return nil end
    local until_ms = tonumber(redis.call('ZSCORE', KEYS[3], client_of(head[1])))
    if until_ms and until_ms > now then return head[1], place_of(head[2]) end
    redis.call('ZREM', KEYS[2], head[1])
  end
end

-- Grant the lock to `head` (taken off the queue) for its claim window (a
-- reader's place, `kind` READER: a read hold), and tell its process: "g TOKEN FENCE NOW_MS CLAIM_MS", on its own
-- channel (`channel` followed by its client's id: no other process wakes)
-- when the lock's clients each have one (lock.per_client), else on the
-- name's channel.
-- The grantee's process has its time cut to that window, so that its
-- other entries are skipped once the grant lapses unclaimed (no LT is
-- needed: while the grant stands, the lock is held and nothing pops). The
-- `releaser`, if any, is the token whose release this is: its process
-- spoke (still_alive), in the same ZADD, before the cut, which wins when
-- both are one process. Returns the fence. (The clients' key is written
-- before the lock: the mutex's lock.set deletes it when the queue is
-- empty, and on a node whose slot is MIGRATING a key that the script
-- deleted is an error to touch.)
local function grant_by_message(head, claim, fence_ttl_s, channel, publish, last, releaser, kind)
  if releaser then
    redis.call('ZADD', KEYS[3], 'XX', now + ALIVE_MS, client_of(releaser), now + claim, client_of(head))
  else
    redis.call('ZADD', KEYS[3], 'XX', now + claim, client_of(head))
  end
  local fence, f = lock.set(head, claim, fence_ttl_s, last, kind)
  local to = channel
  if lock.per_client then to = channel .. client_of(head) end
  redis.call(publish, to, 'g ' .. head .. ' ' .. f .. ' ' .. now .. ' ' .. claim)
  if kind == READER then -- the readers right behind it go in with it
    local next_head, next_claim, next_kind = peek_live()
    if next_kind == READER then
      redis.call('ZREM', KEYS[2], next_head)
      grant_by_message(next_head, next_claim, fence_ttl_s, channel, publish, nil, nil, READER)
    end
  end
  return fence
end

-- The lock is free: grant it to the first live waiter, if any.
local function grant_next(fence_ttl_s, channel, publish)
  local head, claim = pop_live()
  if head then grant_by_message(head, claim, fence_ttl_s, channel, publish) end
end
