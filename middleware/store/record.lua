-- Records one turn (see record.py). ARGV: the named arguments of RecordArguments, in its
-- order, then the variable tail: n_context (key value)*n_context, n_recent record*n_recent,
-- n_pieces (kind tokens terms facts text vector)*n_pieces, tool_window, n_tools tool*n_tools.
-- KEYS: the session's keys in SessionKeys order (ctx sum recent meta traces prompt ids arc idx),
-- then the listing index unless on a cluster.
local turn_id, now, ttl_ms, full_tokens, max_keys, key_history, summary_lines, recent_messages, trace_entries, turn_ids, session_id, index_cutoff, summary_line, trace, prompt_json, archive_turns, postings, vector_prefix, vector_tag, composed = unpack(ARGV, 1, 20)
local at = 20 + 1  -- the variable tail follows the named arguments
local ctx, sum, recent, meta, traces, prompt, ids, arc, idx = unpack(KEYS, 1, 9)
local repaired = {}
-- A key holding a foreign type is replaced, a counter holding no integer is reset;
-- any other error reply (OOM, NOPERM...) stops the script before it writes anything more.
local function call(...)
  local reply = redis.pcall(...)
  if type(reply) ~= 'table' or not reply.err then return reply end
  local args, err = {...}, tostring(reply.err)
  if string.sub(err, 1, 9) == 'WRONGTYPE' then
    redis.call('DEL', args[2])
    repaired[#repaired + 1] = args[2]
  elseif args[1] == 'HINCRBY' and string.find(err, 'not an integer', 1, true) then
    redis.call('HDEL', args[2], args[3])
    repaired[#repaired + 1] = args[2] .. ' ' .. args[3]
  else
    error(reply)
  end
  return redis.call(...)
end

-- The newest ids of a space-separated list, in at most `cap` bytes: past twice that it is
-- cut back to `cap` at an id boundary, so a write seldom scans the list.
local function newest(list, cap)
  if #list <= 2 * cap then return list end
  local at = string.find(list, ' ', #list - cap, true)
  return at and string.sub(list, at + 1) or list
end

-- `command` on `key` with the items of `list` as its arguments, 1000 at a time (Lua's unpack
-- takes about 8000 at most; a turn's terms and those of the turns leaving the archive can be
-- more), none for an empty list; the replies of a read joined in order.
local function each(command, key, list)
  local out = {}
  for i = 1, #list, 1000 do
    local reply = call(command, key, unpack(list, i, math.min(i + 999, #list)))
    if type(reply) == 'table' then
      for j = 1, #reply do out[#out + 1] = reply[j] end
    end
  end
  return out
end

-- A posting list without the ids of turns up to `gone`. Ids are appended in turn order, so
-- those are the list's opening run: the scan stops at the first later id, and a list that
-- starts after `gone` (a common term's, capped long ago) comes back as it is, unread.
local function after(list, gone)
  local at = 1
  while at <= #list do
    local turn = tonumber(string.match(list, '^(%d+)%.', at))  -- anchored at `at`: no copy of the id
    if turn and turn > gone then return at == 1 and list or string.sub(list, at) end
    local space = string.find(list, '%s', at)  -- any white space ends an id, as %S+ reads one
    if space == nil then break end
    at = space + 1
  end
  return ''
end

-- How many ids of turns after `gone` `list` holds, counted up to `most` + 1 (a missing list,
-- false, holds none): the opening run of ids up to `gone` is passed over as `after` drops it,
-- without a copy of the rest.
local RARE = 2
local function held_ids(list, gone, most)
  if not list or list == '' then return 0 end
  local from = 1
  while true do
    local turn = tonumber(string.match(list, '^(%d+)%.', from))
    if turn and turn > gone then break end
    local space = string.find(list, '%s', from)
    if space == nil then return 0 end
    from = space + 1
  end
  local n = 1
  while n <= most do
    local space = string.find(list, ' ', from, true)
    if space == nil then return n end
    n, from = n + 1, space + 1
  end
  return n
end

-- All or nothing: a server refuses a command by its ACL (NOPERM) before the script writes
-- anything, not after half the turn is written (a script's writes are never rolled back,
-- and a replay would take a half-written turn for a recorded one).
local function permitted()
  if not redis.acl_check_cmd then return true end  -- servers before Redis 7 (and the embedded store)
  -- The commands this turn will run, each on its key, and no others: a user denied one this
  -- turn does not run is not refused. Checked as they are listed, with no table built per
  -- check (building them took more of the script's time than the checks: 12 of 18 µs a call
  -- in INFO commandstats on 2026-11-29).
  local denied
  local function need(...)
    if not denied and not redis.acl_check_cmd(...) then denied = {...} end
  end
  need('HINCRBY', meta, 'f', '1') need('HSET', meta, 'f', 'v') need('HSETNX', meta, 'f', 'v') need('HGET', meta, 'f')
  need('HMGET', meta, 'f')
  need('ZRANGE', ids, '0', '1')
  -- Where the variable tail's counts are (as record() walks it below).
  local n_context = tonumber(ARGV[at])
  local n_recent = tonumber(ARGV[at + 1 + 2 * n_context])
  local pieces_at = at + 2 + 2 * n_context + n_recent
  local n_pieces = tonumber(ARGV[pieces_at])
  local window = tonumber(ARGV[pieces_at + 1 + 6 * n_pieces])
  need('HDEL', meta, 'f')  -- a counter holding no integer is reset (see call)
  if n_context > 0 then
    need('ZRANGEBYSCORE', ctx, '0', '1') need('ZADD', ctx, '0', 'm') need('ZREVRANGE', ctx, '0', '-1') need('ZREM', ctx, 'm')
  end
  if tonumber(summary_lines) > 0 then need('RPUSH', sum, 'x') need('LTRIM', sum, '0', '1') end
  if tonumber(recent_messages) > 0 and n_recent > 0 then need('RPUSH', recent, 'x') need('LTRIM', recent, '0', '1') end
  if tonumber(trace_entries) > 0 and trace ~= '' then need('RPUSH', traces, 'x') need('LTRIM', traces, '0', '1') end
  if prompt_json ~= '' then need('SET', prompt, 'x') end
  if turn_id ~= '' then need('ZADD', ids, '0', 'm') need('ZREMRANGEBYRANK', ids, '0', '1') end
  if tonumber(archive_turns) > 0 then
    need('HSET', arc, 'f', 'v') need('HDEL', arc, 'f') need('HKEYS', arc)
    need('HSET', idx, 'f', 'v') need('HDEL', idx, 'f') need('HMGET', idx, 'f') need('HRANDFIELD', idx, '1')
    if vector_prefix ~= '' then
      need('HSET', vector_prefix .. '0.0', 'f', 'v') need('DEL', vector_prefix .. '0.0') need('PEXPIRE', vector_prefix .. '0.0', '1')
    end
  else
    need('UNLINK', arc) need('UNLINK', idx)
  end
  if window > 0 then need('HGETALL', meta) end
  for i = 1, 9 do
    if tonumber(ttl_ms) > 0 then need('PEXPIRE', KEYS[i], '1') else need('PERSIST', KEYS[i]) end
  end
  if denied then
    return redis.error_reply('NOPERM this user may not run ' .. denied[1] .. ' on ' .. denied[2] .. '; nothing of the turn was written')
  end
  return true
end

local function record()
if turn_id ~= '' and call('ZSCORE', ids, turn_id) then
  return {tonumber(redis.pcall('HGET', meta, 'turns')) or 0, 0}
end
local allowed = permitted()
if allowed ~= true then return allowed end

local ttl = tonumber(ttl_ms)
local max_keys, history = tonumber(max_keys), tonumber(key_history)
-- The turn count: what meta says, unless it is missing (evicted, or a new session), not a
-- whole number, or below the highest turn the ids or the archive hold (a hand-edited or
-- corrupt counter); then it is rebuilt from that highest turn, so it never moves backwards
-- and the next turn never overwrites the archive's.
-- (The archive's oldest turn is read with it: it changes only where the archive is cut, below.)
local head = redis.pcall('HMGET', meta, 'turns', 'arc_from')
local stored, arc_from = head, nil
if type(head) == 'table' and not head.err then stored, arc_from = head[1], head[2] end
local count = type(stored) == 'string' and tonumber(stored) or nil
local last = redis.pcall('ZRANGE', ids, '-1', '-1', 'WITHSCORES')
local top = type(last) == 'table' and tonumber(last[2] or '') or 0
if count == nil or count < top or count ~= math.floor(count) then
  local pieces = redis.pcall('HKEYS', arc)
  if type(pieces) == 'table' then
    for _, id in ipairs(pieces) do top = math.max(top, tonumber(string.match(id, '^(%d+)%.')) or 0) end
  end
  call('HSET', meta, 'turns', top)
  if top > 0 or stored then repaired[#repaired + 1] = meta .. ' turns' end
end
local turns = call('HINCRBY', meta, 'turns', '1')
-- The numbers every turn sends go to commands and ids as strings written with %d: a Lua
-- number is written with a float format, for each argument, which took about 5% of the
-- server's time.
local function int(n) return string.format('%d', n) end
local turn = int(turns)
call('HINCRBY', meta, 'full_tokens', full_tokens)
call('HSETNX', meta, 'created', now)
call('HSET', meta, 'updated', now, 'last_turn', turn_id)
if composed == '1' then call('HSET', meta, 'composed', '1') end  -- the session composes from now on

local n_context = tonumber(ARGV[at])
at = at + 1
if n_context > 0 then
  -- Values written by an earlier version carry a clock in microseconds: give them turn scores.
  local legacy = call('ZRANGEBYSCORE', ctx, '1e12', '+inf')
  for rank, member in ipairs(legacy) do call('ZADD', ctx, (turns - 1) * 1000 + rank, member) end
  for i = 0, n_context - 1 do
    call('ZADD', ctx, int(turns * 1000 + i), ARGV[at + 2 * i] .. '=' .. ARGV[at + 2 * i + 1])
  end
  -- Keep the newest `history` values of each key, and the `max_keys` keys set last.
  local rank, count, drop = {}, {}, {}
  for _, member in ipairs(call('ZREVRANGE', ctx, '0', '-1')) do
    local key = string.match(member, '^([^=]+)=')
    if key == nil then
      drop[#drop + 1] = member
    else
      if rank[key] == nil then
        rank[key] = #count + 1
        count[#count + 1] = 0
      end
      count[rank[key]] = count[rank[key]] + 1
      if rank[key] > max_keys or count[rank[key]] > history then drop[#drop + 1] = member end
    end
  end
  for i = 1, #drop, 1000 do call('ZREM', ctx, unpack(drop, i, math.min(i + 999, #drop))) end
end
at = at + 2 * n_context

local keep = tonumber(summary_lines)
if keep > 0 then
  call('RPUSH', sum, summary_line)
  call('LTRIM', sum, int(-keep), '-1')
end
local n_recent = tonumber(ARGV[at])
keep = tonumber(recent_messages)
if keep > 0 and n_recent > 0 then
  call('RPUSH', recent, unpack(ARGV, at + 1, at + n_recent))
  call('LTRIM', recent, int(-keep), '-1')
end
at = at + 1 + n_recent
keep = tonumber(trace_entries)
if keep > 0 and trace ~= '' then
  call('RPUSH', traces, trace)
  call('LTRIM', traces, int(-keep), '-1')
end
if prompt_json ~= '' then call('SET', prompt, prompt_json) end
if turn_id ~= '' then
  call('ZADD', ids, turn, turn_id)
  call('ZREMRANGEBYRANK', ids, '0', int(-tonumber(turn_ids) - 1))
end

local archive, cap, n_pieces, vectors = tonumber(archive_turns), tonumber(postings), tonumber(ARGV[at]), vector_prefix
if archive > 0 then
  local postings, terms = {}, {}
  local prefix, vector_ttl = turn .. '.', int(math.floor(ttl * 1.5))
  for i = 0, n_pieces - 1 do
    local id = prefix .. int(i)
    for term in string.gmatch(ARGV[at + 3 + 6 * i], '%S+') do
      if postings[term] == nil then
        postings[term] = id
        terms[#terms + 1] = term
      else
        postings[term] = postings[term] .. ' ' .. id
      end
    end
  end
  local own = #terms  -- this turn's terms; those only the leaving turns hold follow
  -- The turns leaving the archive now: its oldest (meta's arc_from) and, while that is older
  -- than `gone` (turns kept while archive_turns was higher), the next four oldest with it.
  -- A session archived before arc_from was kept has its oldest turn found once, in the
  -- archive. Each takes its pieces (as many as its index entry says; 32, the most a turn
  -- has, where it says none), their vectors, and its terms' ids of turns gone: a term left
  -- with none goes, so the index holds the archive's terms and no more.
  local gone = turns - archive
  local from, upto, leaving, old, keys, emptied = 1, 0, {}, {}, {}, {}  -- from > upto: none leave
  if gone >= 1 then
    from = tonumber(arc_from or '')
    if not from then
      from = gone
      for _, id in ipairs(call('HKEYS', arc)) do
        local t = tonumber(string.match(id, '^(%d+)%.'))
        if t and t < from then from = t end
      end
    end
    upto = math.min(gone, from + 4)
    if upto >= from then
      local entries = {}
      for t = from, upto do entries[#entries + 1] = '#' .. int(t) end
      local listed = each('HMGET', idx, entries)
      for k = 1, #entries do
        local t = int(from + k - 1) .. '.'
        local count, names = 32, listed[k] or ''
        local n, rest = string.match(names, '^(%d+)|(.*)$')
        if n then count, names = tonumber(n), rest end
        for i = 0, count - 1 do
          old[#old + 1] = t .. int(i)
          if vectors ~= '' then keys[#keys + 1] = vectors .. t .. int(i) end
        end
        for term in string.gmatch(names, '%S+') do
          if leaving[term] == nil and postings[term] == nil then terms[#terms + 1] = term end
          leaving[term] = true
        end
        if listed[k] then emptied[#emptied + 1] = entries[k] end
      end
    end
  end
  -- One read and one write of the lists of every term either touches: this turn's ids join
  -- a list (cut back to its newest `cap` bytes past twice that), the leaving turns' ids go.
  -- A term of this turn is rare when its list then holds at most RARE ids of turns the
  -- archive keeps (its own pieces included; a list not written back may still hold ids of
  -- turns gone, left for the sweep, and they do not count).
  local lists, updates, rare = each('HMGET', idx, terms), {}, {}
  for j, term in ipairs(terms) do
    local list, added = lists[j], postings[term]
    if added then list = newest(list and (list .. ' ' .. added) or added, cap) end
    if list and leaving[term] then list = after(list, gone) end
    if added then rare[term] = held_ids(list, gone, RARE) <= RARE end
    if list == '' then
      emptied[#emptied + 1] = term
    elseif list and list ~= lists[j] then
      updates[#updates + 1] = term
      updates[#updates + 1] = list
    end
  end
  -- A piece's record carries, after its tokens, the share (in hundredths) of its terms that
  -- were rare in the archive when it was written. What a user says once ("I react badly to
  -- latex") is mostly rare words; chatter that comes back turn after turn ("I saw an episode
  -- about X on Tuesday") is not, and recall ranks it below what was new when said
  -- (``archive.FAMILIAR``).
  local fields, stale = {}, {}
  for i = 0, n_pieces - 1 do
    local base, id = at + 1 + 6 * i, prefix .. int(i)
    local n_rare, all = 0, 0
    for term in string.gmatch(ARGV[base + 2], '%S+') do
      all = all + 1
      if rare[term] then n_rare = n_rare + 1 end
    end
    local share = all > 0 and int(math.floor(100 * n_rare / all)) or '100'
    local record = ARGV[base] .. '\t' .. ARGV[base + 1] .. ':' .. share .. '\t' .. ARGV[base + 3] .. '\t' .. ARGV[base + 4]
    fields[#fields + 1] = id
    fields[#fields + 1] = record
    if vectors ~= '' and ARGV[base + 5] ~= '' then  -- semantic recall: the piece's vector, for the server's index
      local key = vectors .. id
      redis.call('HSET', key, 's', vector_tag, 'turn', turn, 'vec', ARGV[base + 5], 'rec', record)
      if ttl > 0 then redis.call('PEXPIRE', key, vector_ttl) end
    elseif vectors ~= '' then
      stale[#stale + 1] = vectors .. id
    end
  end
  -- Vectors outlive their session (below), so a session reset, or expired and begun again,
  -- may find its old pieces' vectors under this turn's ids: those the turn does not write go.
  if vectors ~= '' then
    for i = n_pieces, 31 do stale[#stale + 1] = vectors .. prefix .. int(i) end
    redis.call('DEL', unpack(stale))
  end
  if #fields > 0 then call('HSET', arc, unpack(fields)) end
  if own > 0 then  -- the turn's piece count and terms ("3|a b c"), read when it leaves the archive
    updates[#updates + 1] = '#' .. turn
    updates[#updates + 1] = int(n_pieces) .. '|' .. table.concat(terms, ' ', 1, own)
  end
  each('HSET', idx, updates)
  each('HDEL', idx, emptied)
  each('HDEL', arc, old)
  if #keys > 0 then redis.call('DEL', unpack(keys)) end
  if upto >= from then call('HSET', meta, 'arc_from', int(upto + 1)) end
  -- Vectors outlive their pieces: written to expire half a TTL after the session would, and
  -- renewed every half TTL while the session is written, they are there for every piece the
  -- archive holds (and gone half a TTL after an idle session is).
  if vectors ~= '' and ttl > 0 then
    local renewed = tonumber(redis.pcall('HGET', meta, 'vectors_renewed') or '')
    if not renewed or (tonumber(now) - renewed) * 1000 > ttl / 2 then
      local pieces = call('HKEYS', arc)
      for _, id in ipairs(pieces) do redis.call('PEXPIRE', vectors .. id, vector_ttl) end
      call('HSET', meta, 'vectors_renewed', now)
    end
  end
  -- Sweep: a few terms at random; one whose newest piece fell out of the archive goes.
  local sample = call('HRANDFIELD', idx, '3', 'WITHVALUES')
  if type(sample) ~= 'table' then sample = {} end  -- a missing key: an empty array (nil in some servers)
  for i = 1, #sample, 2 do
    -- Its newest id, the list's last: matched in the list's last bytes only (a pattern not
    -- anchored at the start is tried from every position of a list of hundreds of bytes). A
    -- turn's entry ("#<turn>" = "<count>|<terms>") holds no id, and is never matched.
    local last = tonumber(string.match(string.sub(sample[i + 1], -32), '(%d+)%.%d+$'))
    if last and last <= gone then call('HDEL', idx, sample[i]) end
  end
else
  call('UNLINK', arc, idx)  -- archive_turns 0 keeps none: what an earlier setting kept goes
  call('HDEL', meta, 'arc_from')
end

at = at + 1 + 6 * n_pieces  -- past the pieces
local window, n_tools = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
if window > 0 then
  -- Tools called ("t:<name>" = "<order> <last turn>"): the order a tool was first sent in
  -- stays while it is called within `window` turns; fields older than that are dropped.
  for i = 1, n_tools do
    local field = 't:' .. ARGV[at + 1 + i]
    local old, order = call('HGET', meta, field), nil
    if old then
      local first, last = string.match(old, '^(%d+) (%d+)$')
      if first and turns - tonumber(last) <= window then order = first end
    end
    call('HSET', meta, field, (order or int(turns * 1000 + i)) .. ' ' .. turn)
  end
  local fields = call('HGETALL', meta)
  for i = 1, #fields, 2 do
    if string.sub(fields[i], 1, 2) == 't:' then
      local last = tonumber(string.match(fields[i + 1], ' (%d+)$') or '0')
      if turns - last >= window then call('HDEL', meta, fields[i]) end
    end
  end
end

local ttl_arg = int(ttl)
for i = 1, 9 do
  if ttl > 0 then call('PEXPIRE', KEYS[i], ttl_arg) else call('PERSIST', KEYS[i]) end
end
if KEYS[10] then  -- the listing index: best effort, never fails the turn
  redis.pcall('ZADD', KEYS[10], now, session_id)
  if index_cutoff ~= '' then redis.pcall('ZREMRANGEBYSCORE', KEYS[10], '-inf', index_cutoff) end
end
return {turns, 1, unpack(repaired)}
end

local ok, result = pcall(record)
if ok then return result end
if type(result) == 'table' and result.err then return result end
return redis.error_reply(tostring(result))
