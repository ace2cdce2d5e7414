-- resign: KEYS[1] the election's lock; ARGV[1] token, ARGV[2] channel,
-- ARGV[3] PUBLISH or SPUBLISH
-- The leader resigns: its lock goes and the channel hears "r EPOCH" (the
-- campaigns try; the observers learn that this leader, and not a later
-- one, is gone). Returns 1 if
-- `token` led, else 0 (its lease ran out, or a retry of this resign).
-- #include "_election.lua"
local held, epoch = leader_split(redis.call('GET', KEYS[1]))
if held ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call(ARGV[3], ARGV[2], 'r ' .. epoch)
return 1
