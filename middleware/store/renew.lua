-- A request still running renews its turn's lease (see order.lua), unless the turn was
-- recorded or passed over meanwhile (its lease field is gone). KEYS: the live hash.
-- A turn of another incarnation of the hash (its session was reset: see arrive.lua) has
-- no lease in this one, whatever its number.
-- ARGV: RenewArguments, in its order. Returns 1 when renewed, 0 when the lease was gone.
local now_text, seq, epoch = unpack(ARGV, 1, 3)
local field = 'l:' .. seq
if epoch ~= '' and redis.call('HGET', KEYS[1], 'epoch') ~= epoch then return 0 end
if redis.call('HEXISTS', KEYS[1], field) == 0 then return 0 end
redis.call('HSET', KEYS[1], field, now_text)
return 1
