-- The mutex's lock is a string: its holder's token, then, after a space,
-- its marks, if any: 'w' once a try found it taken (its release then
-- publishes), 'q' while a wait may starve in the queue (its release then
-- hands it on, _lock_mutex.lua). A free lock is one SET NX PX, and a
-- lock nobody waited for is its token alone: the acquire and the release
-- that nobody watches each read or write it once. The holder's fence is
-- not in it: it is the fence key's value, the last fence given.
-- The holder's token and the marks ('' if none) of the lock's value `v`;
-- false when there is no lock, or when the key is not a string (a hash:
-- the lock of a hilock older than 1.1, see mutex_acquire.lua).
local function mutex_split(v)
  if type(v) ~= 'string' then return false, '' end
  local sp = string.find(v, ' ', 1, true)
  if sp == nil then return v, '' end
  return string.sub(v, 1, sp - 1), string.sub(v, sp + 1)
end
