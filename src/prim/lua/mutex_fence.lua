-- fence: KEYS[1] fence; ARGV[1] fence, ARGV[2] fence_ttl_s
-- Redlock: a grant's fence is the largest of its quorum's, and each node
-- counts on its own. Raise this node's counter to it, so that any later
-- grant, whose quorum shares a node with this one, draws a larger fence
-- there. Only ever raises: late or repeated, it is harmless.
local last = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if last < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
  return 1
end
return 0
