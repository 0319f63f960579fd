-- A request arrives (see live.py): apply the turns due, find the open turn its tool results
-- answer (one of the `open:<call id>` fields after the named arguments), or give a new turn
-- its arrival number, with a lease its request renews while it runs (`l:<n>`).
-- The hash's `epoch` names its incarnation: set by the request that creates it (`epoch`, a
-- fresh token), it tells a turn that arrived before a reset from one that arrived after.
-- ARGV: ArriveArguments, in its order, then the fields to look in.
-- Returns {arrival number, open turn or '', first (0/1), the hash's epoch}.
local now_text, wait_text, ttl_text, lease_text, reserve, mark_import, epoch = unpack(ARGV, 1, 7)
--#include order.lua
flush()
redis.call('HSETNX', live, 'epoch', epoch)
local standing = redis.call('HGET', live, 'epoch')  -- this incarnation's: ours, or the one that made the hash
local found = ''
local at = 7 + 1  -- the fields to look in follow the named arguments
for i = at, #ARGV do
  local value = redis.call('HGET', live, ARGV[i])
  -- a turn that began waiting in another incarnation (written after a reset) is no turn of
  -- this one: forgotten, so the request takes a place of its own (its text opens with its epoch)
  local began = value and string.match(value, '^{"epoch":"(%x*)"')
  if began and began ~= '' and began ~= standing then
    redis.call('HDEL', live, ARGV[i])
  elseif value then
    found = value
    break
  end
end
local before = number('arrived')
local seq = 0
if found == '' and reserve == '1' then
  seq = redis.call('HINCRBY', live, 'arrived', 1)
  redis.call('HSET', live, 'l:' .. seq, now_text)
end
-- history may be imported once: by a request that found no turn arrived before it, or, once
-- the request that was to import it failed ('0': it imports all or none), by the next one
local first = 0
if mark_import == '1' then
  local marked = redis.call('HGET', live, 'imported')
  if marked == '0' or (not marked and before == 0) then first = 1 end
  if marked ~= '1' then redis.call('HSET', live, 'imported', '1') end
end
if ttl > 0 then redis.call('PEXPIRE', live, ttl) end
return {seq, found, first, standing}
