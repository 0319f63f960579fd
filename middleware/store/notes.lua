-- Set the notes only if they are still what the edit read (compare and set), and file the
-- edit's id (see notes.py). KEYS: notes edits. ARGV: EditArguments, in its order.
local read, written, edit_id, ids_kept = unpack(ARGV, 1, 4)
local kind = redis.call('TYPE', KEYS[2])['ok']
if kind == 'list' then
  for _, done in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
    if done == edit_id then return 1 end
  end
elseif kind ~= 'none' then
  redis.call('DEL', KEYS[2])  -- something else was written there: replaced
end
if (redis.call('GET', KEYS[1]) or '') ~= read then return 0 end
if written == '' then redis.call('DEL', KEYS[1]) else redis.call('SET', KEYS[1], written) end
redis.call('LPUSH', KEYS[2], edit_id)
redis.call('LTRIM', KEYS[2], 0, tonumber(ids_kept) - 1)
return 1
