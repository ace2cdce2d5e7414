-- The election's lock (election_*.lua): a string "TOKEN EPOCH VALUE", the
-- leader's token, its epoch (its fence: the fence key's value when it was
-- elected) and the value it campaigned with, with its lease as TTL.
-- The token and the epoch (its text: a number concatenated would be
-- printed as 1.8e+15) of a lock value `v`, and its value; false when
-- there is none.
local function leader_split(v)
  if not v then return false end
  local a = string.find(v, ' ', 1, true)
  local b = string.find(v, ' ', a + 1, true)
  return string.sub(v, 1, a - 1), string.sub(v, a + 1, b - 1), string.sub(v, b + 1)
end
