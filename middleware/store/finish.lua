-- A turn ends (see live.py): record it in its place (`entry`: its record arguments as JSON,
-- [] to give the place up), or queue it until the turns before it are recorded.
-- ARGV: FinishArguments, in its order. Returns 1 when the turn is applied, 0 when it waits
-- (its process then flushes again: see flush.lua).
local now_text, wait_text, ttl_text, lease_text, seq, entry, drop, epoch = unpack(ARGV, 1, 8)
--#include order.lua
local place = seq
seq = tonumber(seq)
-- the session was reset (or expired) while the turn ran: it belongs to no session that
-- still stands
if outside(epoch, seq) then return 1 end
if drop ~= '' then redis.call('HDEL', live, drop) end
redis.call('HDEL', live, 'l:' .. place)
if seq <= number('applied') then
  apply(entry)
else
  redis.call('HSET', live, 'q:' .. seq, entry)
  redis.call('HINCRBY', live, 'queued', 1)
end
flush()
if ttl > 0 then redis.call('PEXPIRE', live, ttl) end
if number('applied') >= seq then return 1 end
return 0
