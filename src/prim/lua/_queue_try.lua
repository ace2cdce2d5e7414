-- A try of a wait that has a place in the queue, or takes one (the fair
-- lock's acquire, the mutex's try of a starving wait): see fair_acquire.lua
-- for its keys, arguments and reply. Included last, after _queue.lua and
-- the lock.
queue_clock()
local token = ARGV[1]
local lost = 0
if alive(KEYS[3], token) then lost = 2 end
local held, held_fence = lock.holder()
if held == token then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('ZREM', KEYS[2], token)
  return {1, held_fence, now, '', 0, 1 + lost}
end
if ARGV[4] == '2' then redis.call('ZREM', KEYS[2], token) end
-- A token that had its place ('3') and has none, though it does not hold
-- the lock, lost it with the queue (its key deleted, or a failover to a
-- replica without the latest joins), which alive() does not see when the
-- process's time was kept: the other places of the process may be gone
-- too, and they join again, as after a silence.
if ARGV[4] ~= '1' and join(token, ARGV[2]) and ARGV[4] == '3' then lost = 2 end
redis.call('PEXPIRE', KEYS[2], ALIVE_MS)
if held then
  lock.mark_waiting()
  return {0, lock.pttl(), now, held, held_fence, lost}
end
local head, claim, kind = pop_live()
if head == nil or head == token then
  local fence = lock.set(token, ARGV[2], ARGV[3])
  return {1, fence, now, '', 0, lost}
end
local fence = grant_by_message(head, claim, ARGV[3], ARGV[5], ARGV[6], nil, nil, kind)
return {0, claim, now, head, fence, lost}
