-- The fair lock's lock, for _queue.lua (included after it): a string
-- "TOKEN FENCE" (one SET writes it and its lease, one GET reads it). Each
-- client listens on a channel of its own: a grant wakes its grantee alone.
lock.per_client = true

-- The lock's holder and its fence, or false when the lock is free.
function lock.holder()
  local v = redis.call('GET', KEYS[1])
  if not v then return false end
  local sp = string.find(v, ' ', 1, true)
  return string.sub(v, 1, sp - 1), tonumber(string.sub(v, sp + 1))
end

-- Give the lock to `token`, for ms (`last`: the fence of the lock being
-- released, if any).
function lock.set(token, ms, fence_ttl_s, last)
  local fence, f = next_fence(KEYS[4], fence_ttl_s, nowus, last)
  redis.call('SET', KEYS[1], token .. ' ' .. f, 'PX', ms)
  return fence, f
end

-- A wait joined, or kept, its place while the lock is held: every release
-- looks at the queue anyway.
function lock.mark_waiting() end
