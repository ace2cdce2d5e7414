-- release, on the lock's key alone: KEYS[1] the lock ("TOKEN FENCE", see
-- _lock_str.lua); ARGV[1] token, ARGV[2] the releasing client's channel,
-- ARGV[3] PUBLISH or SPUBLISH.
-- Sent instead of fair_release.lua when that was answered TRYAGAIN: the
-- name's slot is half moved, and the queue or the clients' key is missing
-- beside the lock (fair.c). Deletes the lock if `token` holds it and wakes
-- the releasing client's waits (each client has its own channel; the
-- others' refresh finds the lock free): the next try (each client's head
-- tries at least every second) grants the first live entry of the queue,
-- in order, once the slot has moved. The fence key has the last fence already. Returns 1 if
-- `token` held the lock, else 0.
local v = redis.call('GET', KEYS[1])
if not v or string.sub(v, 1, string.find(v, ' ', 1, true) - 1) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
if ARGV[3] then redis.call(ARGV[3], ARGV[2], 'r') end
return 1
