-- A request answered its client (see live.py): its answer is kept in its slot of the ring
-- (see arrive.lua), for a retry of the request, unless a newer request took the slot since
-- (or the session was reset): the slot must still hold the request's own nonce. Sent ahead
-- of the script that ends the turn, in one round trip, so a retry that finds no answer and
-- the request silent knows it never had one.
-- KEYS: the live hash. ARGV: AnswerArguments, in its order. Returns 1 when kept.
local slot, nonce, answer = unpack(ARGV, 1, 3)
local owner = string.match(redis.call('HGET', KEYS[1], 'r:' .. slot) or '', '^%x+ %d+ %S+ (%x+) %S+$')
if owner == nonce then
  redis.call('HSET', KEYS[1], 'o:' .. slot, answer)
  return 1
end
return 0
