-- check: KEYS[1] lock
-- The fence of the lock's holder, for a resource server that refuses a
-- stale one (hilock_check): the fence key's value (the last fence given),
-- 0 when the lock is free, or 1 when it is held and its fence key is gone
-- (no fence given is ever 1, _fence.lua). Reads only. The fence key is
-- read, not declared, as mutex_break.lua does and for the same reason.
-- A hash is the hold of a hilock older than 1.1: its fence is a field.
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  return tonumber(redis.call('HGET', KEYS[1], 'fence')) or 1
end
if not v then return 0 end
return tonumber(redis.call('GET', KEYS[1] .. ':fence')) or 1
