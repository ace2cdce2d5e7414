-- acquire: KEYS as in _fair.lua (lock, queue, processes, fence);
-- ARGV[1] token, ARGV[2] lease_ms, ARGV[3] fence_ttl_s, ARGV[4] '1' to try
-- once (without joining the queue), '0' (the token's first try), '3' (a
-- later try: the token had its place), or '2' to join again at the tail
-- (after this client's places were lost: its waits join again in their
-- order, whatever places some of them kept), ARGV[5] the channel of
-- grants without a client's id (_fair.lua's grant_by_message adds the
-- grantee's), ARGV[6] PUBLISH or SPUBLISH.
-- The first try of every wait joins the queue at its tail; later tries
-- (the head of each process's waits, at least every second) keep its
-- process's entries alive, and find a grant whose message was missed.
-- Returns {granted, n, now, holder, its fence, flags}:
--   granted 1: ours, with fence n; flags has 1 when it was ours already
--     (granted by a message, or by an earlier send of this try: its lease
--     starts again now), else the lock was free and we were the first live
--     entry (or nobody waits and we try once);
--   granted 0: held by `holder` with `fence` (maybe one of our process's
--     waits, whose grant message was missed) for n ms more (the lock was
--     free, and this try granted it to the first live entry, by message,
--     when n is the claim window);
--   flags has 2 when our process had no time left (see alive()), or a
--     later try ('3') found its place gone: its other waits must join
--     again.
-- `now` is the server's clock (ms): fair.c dates grants by message with it.
-- #include "_fence.lua"
-- #include "_fair.lua"
local token = ARGV[1]
local lost = 0
if alive(KEYS[3], token) then lost = 2 end
local held, held_fence = holder()
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
  return {0, redis.call('PTTL', KEYS[1]), now, held, held_fence, lost}
end
local head, claim = pop_live()
if head == nil or head == token then
  local fence = set_lock(token, ARGV[2], ARGV[3])
  return {1, fence, now, '', 0, lost}
end
local fence = grant_by_message(head, claim, ARGV[3], ARGV[5], ARGV[6])
return {0, claim, now, head, fence, lost}
