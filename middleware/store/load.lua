-- A load (see load.py): the session's four reads and, for a query, the archive's best pieces.
-- KEYS: ctx sum recent meta arc idx traces. ARGV: LoadArguments, in its order.
local archive_turns, recent_turns, candidates, n_terms, query, min_score, scan, common, traces = unpack(ARGV, 1, 9)
local ctx, sum, recent, meta, arc, idx, trace_list = unpack(KEYS, 1, 7)
local out = {redis.pcall('ZRANGE', ctx, 0, -1, 'WITHSCORES'), redis.pcall('LRANGE', sum, 0, -1),
             redis.pcall('LRANGE', recent, 0, -1), redis.pcall('HGETALL', meta), {}, false}
if out[4].err then return out end
local turns, composed = 0, false
for i = 1, #out[4], 2 do
  if out[4][i] == 'turns' then turns = tonumber(out[4][i + 1]) or 0 end
  if out[4][i] == 'composed' then composed = true end
end
-- A young session's turn records, for resending its history (caching.resend_history): only
-- while every turn is still traced and no turn composed instead. Not read: false (nil).
traces = tonumber(traces)
if traces > 0 and not composed and turns <= traces then out[6] = redis.pcall('LRANGE', trace_list, 0, -1) end
-- part: entries (the query's index entries read)
n_terms = tonumber(n_terms)
if n_terms == 0 then return out end
-- The recent window is the whole turns the list holds, newest first, up to its configured
-- turns: raised, it fills one turn at a time, and a turn it does not show yet is still
-- recalled. An entry that is not a message record (the decoder skips it with its turn) ends
-- it: a turn counted as shown and not shown would be neither shown nor recalled.
local window, held = 0, out[3]
for k = #held, 2, -2 do
  if window == tonumber(recent_turns) or not (string.find(held[k], '^{"role":"assistant",')
     and string.find(held[k - 1], '^{"role":"user",')) then break end
  window = window + 1
end
local oldest, newest = turns - tonumber(archive_turns) + 1, turns - window
if turns < 1 then return out end
local terms, weights = {}, {}
for term, weight in string.gmatch(query, '(%S+) (%S+)') do
  terms[#terms + 1] = term
  weights[#weights + 1] = tonumber(weight)
end
if #terms ~= n_terms then return redis.error_reply('ERR the query holds ' .. #terms .. ' terms, not ' .. n_terms) end
local lists = redis.pcall('HMGET', idx, unpack(terms))
-- part: scoring (every piece scored)
local size = redis.pcall('HLEN', arc)
if lists.err or type(size) ~= 'number' then return out end
-- A piece's score is the sum of the weights of the message's terms it holds, so it
-- follows from which terms those are (its mask): the masks are ranked, not the pieces,
-- and a table.sort over every piece (most of a recall's time in Lua) is not needed.
-- The recent window's turns (`fresh`) are shown but for their calls and results: their ids
-- are kept apart, not counted among a term's pieces (`n`; the archive's size, HLEN, holds
-- them), so older pieces score much as they would without them.
-- The archive's horizon (`oldest`) holds for them too: a window longer than the archive
-- recalls nothing the archive no longer keeps.
local mask, order, idf, upper, last = {}, {}, {}, newest + 1, turns + 1
local fresh, fresh_order = {}, {}
scan, common = tonumber(scan), tonumber(common)
for j = 1, n_terms do
  local list, n, bit = lists[j], 0, 2 ^ (j - 1)
  local above = 2 * bit
  if list and #list >= scan then  -- a common word: the first `common` of them only
    common = common - 1
    if common < 0 then list = nil end
  end
  if list and #list > scan then  -- the newest `scan` bytes: the ids that start in them
    list = string.sub(list, (string.find(list, ' ', #list - scan, true) or #list) + 1)
  end
  if list then
    for id in string.gmatch(list, '[^ ]+') do  -- a set, not %S: a few ns an id less
      local m = mask[id]
      if m == nil then  -- first seen: in the list of the first of its terms, in that list's order
        local t = tonumber(id)  -- "<turn>.<n>" read as a number: its turn plus a fraction below one
        if t and t >= oldest and t < upper then
          order[#order + 1] = id
          mask[id], n = bit, n + 1
        else
          mask[id] = false  -- out of range: not read again
          if t and t >= upper and t >= oldest and t < last then fresh[id], fresh_order[#fresh_order + 1] = bit, id end
        end
      elseif m then
        if m % above < bit then mask[id], n = m + bit, n + 1 end  -- once per term
      else
        local f = fresh[id]
        if f and f % above < bit then fresh[id] = f + bit end
      end
    end
  end
  idf[j] = weights[j] * math.log(1 + (size - n + 0.5) / (n + 0.5))
end
-- Each mask's pieces, newest first: `order` holds each term's new ids oldest first, so
-- read backwards it gives every mask its pieces newest first. Only the current
-- message's own terms (weight 1) select, above the floor; the others rank.
local floor, groups, score, asked, masks = tonumber(min_score), {}, {}, {}, {}
local function scored(m)  -- a mask's score, its own terms' part, and whether it holds one of them
  local total, own, selects, rest, k = 0, 0, false, m, 1
  while rest > 0 do  -- up to its last term only
    local held = rest % 2
    if held == 1 then
      total = total + idf[k]
      if weights[k] >= 1 then own, selects = own + idf[k], true end
    end
    rest, k = (rest - held) / 2, k + 1
  end
  return total, own, selects
end
for i = #order, 1, -1 do
  local id = order[i]
  local m = mask[id]
  local group = groups[m]
  if group == nil then
    local total, own, selects = scored(m)
    group, score[m], asked[m] = {}, total, own
    groups[m] = group
    if selects and own >= floor then masks[#masks + 1] = m end
  end
  group[#group + 1] = id
end
-- Best masks first; pieces of masks that score the same, newest first among them (a turn's
-- pieces: the last first). A term's ids are in the order they were written, newest last.
table.sort(masks, function(a, b) return score[a] > score[b] end)
local function newer(a, b)  -- newest turn first, then its last piece first
  local ta, na = string.match(a, '^(%d+)%.(%d+)$')
  local tb, nb = string.match(b, '^(%d+)%.(%d+)$')
  ta, na, tb, nb = tonumber(ta) or 0, tonumber(na) or 0, tonumber(tb) or 0, tonumber(nb) or 0
  if ta ~= tb then return ta > tb end
  return na > nb
end
local best, limit, i = {}, 2 * tonumber(candidates), 1
while i <= #masks and #best < limit do
  local tied = {masks[i]}
  while i + #tied <= #masks and score[masks[i + #tied]] == score[masks[i]] do tied[#tied + 1] = masks[i + #tied] end
  local ids = groups[tied[1]]
  if #tied > 1 then
    ids = {}
    for _, m in ipairs(tied) do
      for _, id in ipairs(groups[m]) do ids[#ids + 1] = id end
    end
    table.sort(ids, newer)  -- as within a mask
  end
  for _, id in ipairs(ids) do
    if #best == limit then break end
    best[#best + 1] = id
  end
  i = i + #tied
end
-- Read in turn only as many as are still wanted: most texts are not repeats, so one read of
-- `candidates` records usually does.
-- part: chosen (the chosen pieces read and sent)
local wanted, row, seen, names_of, at = tonumber(candidates), out[5], {}, {}, 1
local sent = 0
local function add(id, m, total, own, record)  -- a piece sent: its id, scores, the terms it holds, its record
  local names = names_of[m]
  if names == nil then
    local held, rest = {}, m
    for j = 1, n_terms do
      if rest % 2 == 1 then held[#held + 1] = terms[j] end
      rest = math.floor(rest / 2)
    end
    names = table.concat(held, ' ')
    names_of[m] = names
  end
  row[#row + 1] = id
  row[#row + 1] = tostring(total)
  row[#row + 1] = tostring(own)
  row[#row + 1] = names
  row[#row + 1] = record
end
while sent < wanted and at <= #best do
  local batch = {}
  for k = at, math.min(at + wanted - sent - 1, #best) do batch[#batch + 1] = best[k] end
  at = at + #batch
  local records = redis.pcall('HMGET', arc, unpack(batch))
  if records.err then return out end
  for i, id in ipairs(batch) do
    -- The same text from another turn says nothing new: one of each, at most `candidates`.
    -- Anchored at the start (as Python splits it, the text is what follows the third tab, up
    -- to a user sentence's neighbours after the next): an unanchored '[^\t]*$' retries from
    -- every position and costs several µs a record.
    local text = records[i] and string.match(records[i], '^[^\t]*\t[^\t]*\t[^\t]*\t([^\t]*)')
    if text and not seen[text] then
      seen[text], sent = true, sent + 1
      local m = mask[id]
      add(id, m, score[m], asked[m], records[i])
    end
  end
end
-- part: window (the recent window's calls and results the message's own terms reach: the
-- window shows its user messages and replies only). Read after the older pieces, best
-- first (newest first among equals), at most `candidates`; its user messages and replies
-- are not sent.
local near, near_score, near_own = {}, {}, {}
for _, id in ipairs(fresh_order) do
  local total, own, selects = scored(fresh[id])
  if selects and own >= floor then
    near[#near + 1] = id
    near_score[id], near_own[id] = total, own
  end
end
if #near == 0 or wanted < 1 then return out end
table.sort(near, function(a, b)
  if near_score[a] ~= near_score[b] then return near_score[a] > near_score[b] end
  return newer(a, b)
end)
local records = redis.pcall('HMGET', arc, unpack(near))
if records.err then return out end
local added = 0
for i, id in ipairs(near) do
  if added >= wanted then break end
  local kind, text = string.match(records[i] or '', '^([^\t]*)\t[^\t]*\t[^\t]*\t([^\t]*)')
  if text and kind ~= 'user' and kind ~= 'reply' and not seen[text] then
    seen[text], added = true, added + 1
    add(id, fresh[id], near_score[id], near_own[id], records[i])
  end
end
return out
