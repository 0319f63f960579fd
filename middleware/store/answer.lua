-- A request answered its client (see live.py): its answer is kept in its slot of the ring
-- (see arrive.lua), for a retry of the request, unless a newer request took the slot since
-- (or the session was reset). Sent ahead of the script that ends the turn, in one round
-- trip, so a retry that finds the turn gone and no answer knows the request never had one.
-- KEYS: the live hash. ARGV: AnswerArguments, in its order. Returns 1 when kept.
local slot, key, answer = unpack(ARGV, 1, 3)
local taken = redis.call('HGET', KEYS[1], 'r:' .. slot)
if taken and string.sub(taken, 1, #key + 1) == key .. ' ' then
  redis.call('HSET', KEYS[1], 'o:' .. slot, answer)
  return 1
end
return 0
