-- A request arrives (see live.py): apply the turns due, find the open turn its tool results
-- answer (one of the `open:<call id>` fields after the named arguments), or give a new turn
-- its arrival number, with a lease its request renews while it runs (`l:<n>`).
-- The hash's `epoch` names its incarnation: set by the request that creates it (`epoch`, a
-- fresh token), it tells a turn that arrived before a reset from one that arrived after.
-- A request with a key (its idempotency key or its body's digest) takes a slot in the ring of
-- the session's last RING requests (`r:<slot>`: the key, its arrival number, when it came,
-- its nonce and when its request last said it was alive, see beat.lua; `o:<slot>`: its
-- answer, once it has one, see answer.lua). A retry looks its key up there first: found (the
-- newest, within RETRY_SECONDS), it takes nothing and waits for that answer.
-- ARGV: ArriveArguments, in its order, then the fields to look in.
-- Returns {arrival number, open turn or '', first (0/1), the hash's epoch, the slot taken or
-- -1, and for a retry found, '<slot> <nonce>' of the request it retries, else ''}.
local now_text, wait_text, ttl_text, lease_text, reserve, mark_import, epoch, key, retry, nonce = unpack(ARGV, 1, 10)
--#include order.lua
local RING, RETRY_SECONDS = 4, 600
flush()
redis.call('HSETNX', live, 'epoch', epoch)
local standing = redis.call('HGET', live, 'epoch')  -- this incarnation's: ours, or the one that made the hash
if retry == '1' and key ~= '' then
  local retried, newest = '', -1
  for slot = 0, RING - 1 do
    local entry = redis.call('HGET', live, 'r:' .. slot) or ''
    local taken, came, owner = string.match(entry, '^(%x+) %d+ (%S+) (%x+) %S+$')
    came = tonumber(came)
    if taken == key and came and now - came <= RETRY_SECONDS and came > newest then
      retried, newest = slot .. ' ' .. owner, came
    end
  end
  if retried ~= '' then
    if ttl > 0 then redis.call('PEXPIRE', live, ttl) end
    return {0, '', 0, standing, -1, retried}
  end
end
local found = ''
local at = 10 + 1  -- the fields to look in follow the named arguments
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
local slot = -1
if key ~= '' then
  slot = redis.call('HINCRBY', live, 'requests', 1) % RING
  redis.call('HSET', live, 'r:' .. slot, table.concat({key, seq, now_text, nonce, now_text}, ' '))
  redis.call('HDEL', live, 'o:' .. slot)
end
if ttl > 0 then redis.call('PEXPIRE', live, ttl) end
return {seq, found, first, standing, slot, ''}
