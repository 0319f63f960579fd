-- A turn finished but queued behind an earlier one still holding the line (see live.py):
-- its process applies the turns due again, until its own is applied, so a session whose
-- requests stop does not keep it out of memory until its next request.
-- ARGV: FlushArguments, in its order. Returns {1, applied} once turn `seq` is applied (or
-- the session is gone), else {0, applied}: `applied`, the last place applied, tells its
-- process whether the line moves.
local now_text, wait_text, ttl_text, lease_text, seq, epoch = unpack(ARGV, 1, 6)
--#include order.lua
seq = tonumber(seq)
-- gone, or reset since
if outside(epoch, seq) then return {1, 0} end
flush()
if ttl > 0 then redis.call('PEXPIRE', live, ttl) end
local applied = number('applied')
if applied >= seq then return {1, applied} end
return {0, applied}
