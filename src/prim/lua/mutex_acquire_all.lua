-- acquire_all: KEYS the lock and the fence of each name of a multi-lock
-- that share a node (on a Cluster, a slot), in the multi-lock's order:
-- lock1, fence1, lock2, fence2...; ARGV[1] token, ARGV[2] lease_ms,
-- ARGV[3] fence_ttl_s.
-- All of them free: take them all at once (multi.c) -> their fences, in
-- order; ours already (a retry whose reply was lost: the first send took
-- them all, or none) -> the same fences. Any one held -> 0, and nothing is
-- taken: the multi-lock then waits for its names one at a time, in order,
-- as mutex_acquire.lua's waits do.
-- #include "_fence.lua"
-- #include "_mutex_value.lua"
local fences = {}
if mutex_split(redis.pcall('GET', KEYS[1])) == ARGV[1] then
  for i = 2, #KEYS, 2 do
    fences[#fences + 1] = tonumber(redis.call('GET', KEYS[i])) or next_fence(KEYS[i], ARGV[3])
  end
  return fences
end
for i = 1, #KEYS, 2 do
  if redis.call('EXISTS', KEYS[i]) == 1 then return 0 end
end
for i = 1, #KEYS, 2 do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
  fences[#fences + 1] = next_fence(KEYS[i + 1], ARGV[3])
end
return fences
