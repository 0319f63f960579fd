-- Shared by arrive.lua, finish.lua and flush.lua (included after their argument line, which names
-- now_text, wait_text, ttl_text and lease_text): apply queued turns strictly in arrival
-- order. A turn is applied by the store's own record script (record.lua), run here as a
-- function: scripts cannot call scripts. A turn not yet finished holds the line while its
-- request renews its lease (`l:<n>`, the time of the last renewal), for `wait` seconds at
-- most; a turn whose lease lapsed (its process died, or its reply was lost) is passed over.
-- KEYS: the live hash, then the recorded keys in their order, then the listing index unless
-- on a cluster.
local live = KEYS[1]
local now, wait, ttl, lease = tonumber(now_text), tonumber(wait_text), tonumber(ttl_text), tonumber(lease_text)
local recorded = {unpack(KEYS, 2)}
local function record_turn(KEYS, ARGV)
--#include record.lua
end
local function number(name) return tonumber(redis.call('HGET', live, name) or '0') or 0 end
-- whether turn `seq` (a number) of incarnation `epoch` of the hash (see arrive.lua) is outside
-- the session that stands: it was reset (or expired) while the turn ran, so the turn arrived
-- in another incarnation, or took a place this one never gave out (a deleted hash reads
-- arrived 0). A turn whose epoch is '' does not say: the place it took tells.
local function outside(epoch, seq)
  return (epoch ~= '' and redis.call('HGET', live, 'epoch') ~= epoch) or seq > number('arrived')
end
local function apply(entry)
  local arguments = cjson.decode(entry)
  if #arguments > 0 then record_turn(recorded, arguments) end
end
local function flush()
  local applied, arrived, queued = number('applied'), number('arrived'), number('queued')
  while queued > 0 and applied < arrived do
    local name = 'q:' .. (applied + 1)
    local entry = redis.call('HGET', live, name)
    if entry then
      apply(entry)
      redis.call('HDEL', live, name)
      queued = queued - 1
    else
      -- the turn holding the line is passed over once its lease lapsed, or once the
      -- waiting ones waited long enough
      local blocked = tonumber(redis.call('HGET', live, 'blocked') or '')
      if not blocked then
        blocked = now
        redis.call('HSET', live, 'blocked', now_text)
      end
      local renewed = tonumber(redis.call('HGET', live, 'l:' .. (applied + 1)) or '')
      if renewed and now - renewed < lease and now - blocked < wait then break end
      redis.call('HSET', live, 'blocked', now_text)
    end
    redis.call('HDEL', live, 'l:' .. (applied + 1))
    applied = applied + 1
  end
  if queued <= 0 then redis.call('HDEL', live, 'blocked') queued = 0 end
  redis.call('HSET', live, 'applied', applied, 'queued', queued)
end
