-- renew many: KEYS[i] lock i; ARGV[2i-1] its token, ARGV[2i] its lease_ms.
-- The renewal of each lock, as mutex_renew.lua does it (never over
-- Redlock, so without its fence), in one call: the keys share a slot.
-- Returns a string of one character per key: "1" where the lease was
-- extended, "2" where it was and a revoke asks its holder to release it
-- (mutex_revoke.lua), "0" where the lock is no longer that token's (one
-- reply, not an array of integers: cheaper for Redis to write and the
-- client to read).
-- #include "_mutex_value.lua"
local call, pcall, keys, argv = redis.call, redis.pcall, KEYS, ARGV
local out = {}
for i = 1, #keys do
  local held, marks = mutex_split(pcall('GET', keys[i]))
  if held == argv[2 * i - 1] then
    call('PEXPIRE', keys[i], argv[2 * i])
    out[i] = (marks ~= '' and string.find(marks, 'v', 1, true)) and '2' or '1'
  else
    out[i] = '0'
  end
end
return table.concat(out)
