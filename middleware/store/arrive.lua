-- A request arrives (see live.py): apply the turns due, find the open turn its tool results
-- answer (one of the `open:<call id>` fields after the named arguments), or give a new turn
-- its arrival number, with a lease its request renews while it runs (`l:<n>`).
-- ARGV: ArriveArguments, in its order, then the fields to look in.
-- Returns {arrival number, open turn or '', first (0/1)}.
local now_text, wait_text, ttl_text, lease_text, reserve, mark_import = unpack(ARGV, 1, 6)
--#include order.lua
flush()
local found = ''
local at = 6 + 1  -- the fields to look in follow the named arguments
for i = at, #ARGV do
  local value = redis.call('HGET', live, ARGV[i])
  if value then found = value break end
end
local before = number('arrived')
local seq = 0
if found == '' and reserve == '1' then
  seq = redis.call('HINCRBY', live, 'arrived', 1)
  redis.call('HSET', live, 'l:' .. seq, now_text)
end
-- history may be imported once, by a request that found no turn arrived before it
local first = 0
if mark_import == '1' and redis.call('HSETNX', live, 'imported', '1') == 1 and before == 0 then first = 1 end
if ttl > 0 then redis.call('PEXPIRE', live, ttl) end
return {seq, found, first}
