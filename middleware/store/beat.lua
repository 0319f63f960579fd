-- A request still running says so (see live.py): the time in its slot of the ring of requests
-- (see arrive.lua), found by its nonce, until its answer is kept. A retry of it waits while
-- it does, and runs as a new turn once it stops (its process died).
-- KEYS: the live hash. ARGV: BeatArguments, in its order. Returns 1 when its slot was found.
local now_text, nonce = unpack(ARGV, 1, 2)
local RING = 4
for slot = 0, RING - 1 do
  local entry = redis.call('HGET', KEYS[1], 'r:' .. slot) or ''
  local head, owner = string.match(entry, '^(%x+ %d+ %S+) (%x+) %S+$')
  if owner == nonce then
    if redis.call('HEXISTS', KEYS[1], 'o:' .. slot) == 0 then
      redis.call('HSET', KEYS[1], 'r:' .. slot, table.concat({head, nonce, now_text}, ' '))
    end
    return 1
  end
end
return 0
