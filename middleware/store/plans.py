"""Every store operation as a plan: a generator that yields command batches and receives
their replies. No I/O: the drivers in ``middleware.store`` send the batches; tests feed
replies in by hand.

Layout (all keys of a session share the hash tag ``{<session id>}``, so a session lives
in one Redis Cluster slot)::

    <prefix>:{<sid>}:ctx      zset   member "key=value", score = turn * 1000 + position: each key's newest values
    <prefix>:{<sid>}:sum      list   summary lines, oldest first
    <prefix>:{<sid>}:recent   list   JSON {"role","content","tokens","turn"}: the recent window
    <prefix>:{<sid>}:meta     hash   turns, full_tokens, created, updated, last_turn, user, agent,
                                     and "t:<tool>" = "<order> <last turn>" for the tools called recently
    <prefix>:{<sid>}:traces   list   JSON turn records for the inspector
    <prefix>:{<sid>}:prompt   string JSON of the prompt sent on the last recorded turn
    <prefix>:{<sid>}:ids      zset   ids of the last turns written, score = turn number
    <prefix>:{<sid>}:arc      hash   the episodic archive: "<turn>.<n>" -> "kind\ttokens\tterms\ttext"
    <prefix>:{<sid>}:idx      hash   term -> ids of the archived pieces holding it, newest last
    <prefix>:{<sid>}:live     hash   the endpoint's turns in flight (see middleware.core.live)
    <prefix>:{u:<user>|<agent>}:active / :sessions / :notes   a (user, agent) pair
    <prefix>:{u:<user>|<agent>}:edits    list   ids of the last edits of its notes, newest first
    <prefix>:sessions         zset   session id -> last update (seconds): the listing index

A load is one round trip. Recording a turn is one server-side script (``RECORD_SCRIPT``):
atomic, so concurrent writers lose nothing; idempotent by turn id, so a retry after a
lost reply writes nothing twice; and it applies the bounds that depend on what is stored
(the newest value of each context key, the keys set most recently) where the data is,
so no writer reads and writes back. Every write refreshes the TTL of the whole session.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, NamedTuple

import orjson

from ..config.schema import Config
from ..core.archive import MIN_SCORE, Candidate
from ..core.context import sanitize_key, sanitize_value
from ..core.effects import Batch, Command, Plan
from ..core.state import SessionPage, SessionState, SessionSummary, StoredMessage, TurnUpdate, built, whole_pairs
from ..core.text import one_line, quoted
from ..exceptions import InvalidInputError, StoreError

# The store's own records (recent messages, traces) are plain dicts built here: orjson
# encodes and decodes them about ten times faster than the json module.
_dumps = orjson.dumps
_loads = orjson.loads


# --- key layout --------------------------------------------------------------


def _escape_tag(text: str) -> str:
    # The hash tag is the text between the first '{' and the next '}': braces in an id
    # must not end it early. '%' is escaped too so the mapping is one-to-one.
    return text.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


class SessionKeys(NamedTuple):
    """The Redis key names of one session: written, expiring and reset together."""

    ctx: str
    sum: str
    recent: str
    meta: str
    traces: str
    prompt: str
    ids: str
    arc: str
    idx: str
    live: str  # written by the endpoint only; here so that it expires and resets with the session


class PairKeys(NamedTuple):
    """The keys of one (user, agent) pair: its active session, its sessions, its notes and
    the ids of the last edits of its notes."""

    active: str
    sessions: str
    notes: str
    edits: str


@functools.lru_cache(maxsize=65_536)
def session_keys(prefix: str, session_id: str) -> SessionKeys:
    """The keys of a session, built in this one place."""
    base = f"{prefix}:{{{_escape_tag(session_id)}}}"
    return SessionKeys(*(f"{base}:{name}" for name in SessionKeys._fields))


def pair_keys(prefix: str, user_id: str, agent: str) -> PairKeys:
    """The keys of a (user, agent) pair; '|' separates the two, so it is escaped inside them."""
    tag = "|".join(_escape_tag(part).replace("|", "%7C") for part in (user_id, agent))
    return PairKeys(*(f"{prefix}:{{u:{tag}}}:{name}" for name in PairKeys._fields))


# Ids of the last turns each session remembers: a write retried after its reply was lost,
# or a turn held through an outage, is recognised if fewer than this many turns landed since.
TURN_IDS = 128
# Bytes of piece ids an index term keeps (between this and twice this, so that a list is
# not cut on every write), newest last; a recall reads the newest this many of each term,
# about 20 to 27 ids, which bounds its work whatever the archive holds. Reading more (256
# to 512 bytes, as before) cost up to twice the server time for a long message and kept no
# more needed values; reading 128 lost one answer in 289 with semantic recall
# (`python -m benchmarks.recall`).
POSTINGS = 192
# Of the message's terms whose lists fill those bytes (common words, held by a dozen or more
# recent pieces), a recall reads the first this many, in the message's order: such words
# rank little and cost the most to read. Reading all of them took 40% more server time
# for a long message and kept no more needed values (`python -m benchmarks.recall`).
COMMON_TERMS = 6
# Pieces a recall sends back at most, best first: the bytes read per call do not grow with the archive.
CANDIDATES = 10


@dataclass(frozen=True, slots=True)
class Layout:
    """How one config lays sessions out: key names, bounds and expiry, read once."""

    config: Config
    prefix: str
    index: str
    max_keys: int  # context keys kept: those set most recently (shown ones and earlier ones)
    key_history: int  # values kept per context key, newest first (the first is the current one)
    summary_lines: int  # lines kept: those shown plus those of turns still in the recent window
    recent_messages: int
    trace_entries: int
    ttl_ms: int
    turn_ids: int  # ids of the last turns written, so a retried write is recognised
    archive_turns: int  # turns whose pieces the archive keeps (0: none)
    recall: bool  # a load asks the archive for what the current message needs
    cluster: bool
    notes_shown: bool  # notes.max_tokens > 0: a load reads the notes
    tool_window: int = 0  # turns a called tool is remembered for disclosure (0: none are)

    @classmethod
    def of(cls, config: Config) -> Layout:
        shown, prefix = config.summary.lines, config.store.key_prefix
        return cls(
            config=config,
            prefix=prefix,
            index=f"{prefix}:sessions",
            max_keys=config.context.max_keys + config.context.earlier_keys,
            key_history=config.context.history,
            summary_lines=shown + (0 if config.summary.cover_recent or not shown else config.recent.turns),
            recent_messages=config.recent.messages,
            trace_entries=config.traces.max_entries,
            ttl_ms=config.store.ttl_seconds * 1000,
            turn_ids=TURN_IDS,
            archive_turns=config.memory.archive_turns,
            recall=bool(config.memory.archive_turns and config.memory.recall_tokens),
            cluster=config.store.cluster,
            notes_shown=config.notes.max_tokens > 0,
            tool_window=config.disclosure.recent_turns if config.disclosure.enabled else 0,
        )

    def session(self, session_id: str) -> SessionKeys:
        return session_keys(self.prefix, session_id)

    def pair(self, user_id: str, agent: str) -> PairKeys:
        return pair_keys(self.prefix, user_id, agent)


# --- replies -----------------------------------------------------------------


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _text_or_empty(value: Any) -> str:
    """A string reply as text; a missing key (None) or anything else as ""."""
    return _text(value) if isinstance(value, bytes) else ""


def error_text(error: BaseException) -> str:
    """What Redis said, without the failed command that redis-py quotes before it (its
    arguments carry message text): ``Command # 3 (RPUSH … ) of pipeline caused error: X`` is X."""
    said: Any = error.args[0] if error.args else ""
    while isinstance(said, tuple) and said:  # redis.asyncio nests the message in a tuple
        said = said[0]
    return str(said).rsplit(" of pipeline caused error: ", 1)[-1][:200]


def _wrong_type(error: BaseException) -> bool:
    """A key holding another type of value: a corrupt record, skipped on read, replaced on write."""
    return error_text(error).startswith("WRONGTYPE")


def _refused(error: BaseException) -> StoreError:
    return StoreError(f"Redis replied with an error: {type(error).__name__}: {error_text(error)}")


def _checked(replies: Sequence[Any]) -> Sequence[Any]:
    """The replies, or StoreError for the first error reply among them."""
    for reply in replies:
        if isinstance(reply, Exception):
            raise _refused(reply)
    return replies


class Corrupt(NamedTuple):
    """A record skipped on load: which part of the session, and why."""

    part: str
    reason: str


# --- load --------------------------------------------------------------------


@functools.lru_cache(maxsize=65_536)
def load_commands(keys: SessionKeys) -> tuple[Command, ...]:
    """The reads of one load: the same for a session every time, so built once."""
    return (
        ("zrange", keys.ctx, 0, -1, False, True),  # desc=False, withscores=True
        ("lrange", keys.sum, 0, -1),
        ("lrange", keys.recent, 0, -1),
        ("hgetall", keys.meta),
    )


_PARTS = ("ctx", "sum", "recent", "meta")  # what load_commands reads, in order
_LOAD_REPLIES = len(_PARTS)
_META_FIELDS = {name: name.encode() for name in ("turns", "full_tokens", "created", "updated")}


def _turn_of(score: float) -> int:
    """The turn a context value was set in, from its score (0 for a value stored by an
    earlier version, scored by the clock)."""
    return int(score // 1000) if score < 1e12 else 0


def _decode_context(
    reply: Any, config: Config, bad: list[Corrupt]
) -> tuple[dict[str, str], dict[str, str], dict[str, list[tuple[str, int]]]]:
    """The current value of each key (its newest): of the ``max_keys`` keys set last, and of
    the ``earlier_keys`` set before them; and each key's earlier values, newest first."""
    values: dict[str, list[tuple[float, str]]] = {}
    limit = config.context.max_value_chars
    for raw, score in reply:  # lowest score first
        text = _text(raw)
        key, equals, value = text.partition("=")
        clean_key = sanitize_key(key)
        # Values were sanitized when written; a record written behind our back is re-sanitized.
        clean_value = (value if value.isprintable() and len(value) <= limit and value == value.strip() and value
                       else sanitize_value(value, limit)) if equals else None  # fmt: skip
        if clean_key is None or clean_value is None:
            bad.append(Corrupt("ctx", f"member {text[:80]!r} has an unusable key or value"))
            continue
        values.setdefault(clean_key, []).append((score, clean_value))
    for history in values.values():
        if len(history) > 1:
            history.sort()  # a reply not in score order (the store's is) still gives the newest last
    if config.context.keys is not None and not values.keys() <= set(config.context.keys):
        values = {k: v for k, v in values.items() if k in config.context.keys}
    kept = config.context.max_keys + config.context.earlier_keys
    # In the order they were last set; beyond what is kept, the keys set most recently.
    values = dict(sorted(values.items(), key=lambda item: item[1][-1][0])[-kept:])
    latest = [(key, history[-1][1]) for key, history in values.items()]
    cut = max(len(latest) - config.context.max_keys, 0)  # the keys set before the max_keys set last
    context, earlier = dict(latest[cut:]), dict(latest[:cut])
    facts = {key: [(value, _turn_of(score)) for score, value in reversed(history[:-1])]
             for key, history in values.items() if len(history) > 1}  # fmt: skip
    return context, earlier, facts


def _decode_recent(reply: Any, bad: list[Corrupt]) -> list[StoredMessage]:
    messages = []
    for raw in reply:
        try:
            record = _loads(raw)
            role, content = record["role"], record["content"]
            tokens = record.get("tokens", -1)
            if role not in {"user", "assistant"} or not isinstance(content, str):
                raise ValueError("bad role or content")
        except (ValueError, TypeError, KeyError, AttributeError):
            bad.append(Corrupt("recent", f"entry {raw[:80]!r} is not a message record"))
            continue
        valid_count = isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0
        messages.append(StoredMessage(role, content, tokens if valid_count else -1))
    return whole_pairs(messages)


def _decode_summary(reply: Iterable[bytes], config: Config) -> list[str]:
    limit = config.summary.user_brief_chars + config.summary.action_brief_chars + 8
    lines = [one_line(raw.decode("utf-8", "replace"), limit) for raw in reply]
    return [line for line in lines if line]


def _meta_number(meta: Mapping[bytes, bytes], name: str, kind: type, bad: list[Corrupt]) -> Any:
    raw = meta.get(_META_FIELDS[name])
    if raw is None:
        return None
    try:
        return kind(raw.decode())
    except (ValueError, UnicodeDecodeError):
        bad.append(Corrupt("meta", f"{name}={raw[:40]!r} is not a number"))
        return None


def _tool_uses(meta: Mapping[bytes, bytes], bad: list[Corrupt]) -> dict[str, tuple[int, int]]:
    """The ``t:<tool>`` fields of the meta hash: tool name -> (order first sent, last turn)."""
    uses = {}
    for field, value in meta.items():
        if not field.startswith(b"t:"):
            continue
        order, _, last = value.partition(b" ")
        if not (order.isdigit() and last.isdigit()):
            bad.append(Corrupt("meta", f"{field[:80]!r}={value[:40]!r} is not '<order> <turn>'"))
            continue
        uses[field[2:].decode("utf-8", "replace")] = (int(order), int(last))
    return uses


def _owner(meta: Mapping[bytes, bytes]) -> tuple[str, str] | None:
    user, agent = meta.get(b"user"), meta.get(b"agent")
    if isinstance(user, bytes) and isinstance(agent, bytes):
        return user.decode("utf-8", "replace"), agent.decode("utf-8", "replace")
    return None


class Loaded(NamedTuple):
    state: SessionState
    corrupt: tuple[Corrupt, ...]  # records skipped
    missing: tuple[str, ...] = ()  # parts a session with turns must have and has not (evicted under maxmemory)
    candidates: tuple[Candidate, ...] = ()  # archived pieces the recall query found, best first


def _missing(replies: Sequence[Any], turns: int, config: Config, bad: list[Corrupt]) -> tuple[str, ...]:
    """The parts every recorded turn writes that are gone while others stay: what an
    eviction policy left of the session (a session expires whole; nothing else removes
    one part). Parts read as corrupt are reported as such, not here."""
    ctx, summary, recent, meta = replies[:_LOAD_REPLIES]
    unreadable = {c.part for c in bad if c.reason.startswith("unreadable")}
    if not meta and "meta" not in unreadable:
        return ("meta",) if summary or recent or ctx else ()
    expected = (("sum", summary, config.summary.lines), ("recent", recent, config.recent.messages))
    return tuple(part for part, reply, kept in expected if turns and kept and not reply and part not in unreadable)


def decode_state(session_id: str, replies: Sequence[Any], config: Config) -> Loaded:
    """The state from the replies of ``load_commands`` (further replies are ignored); corrupt
    parts are skipped and listed."""
    bad: list[Corrupt] = []
    ctx, summary, recent_records, meta = replies[:_LOAD_REPLIES]
    if any(map(isinstance, (ctx, summary, recent_records, meta), repeat(Exception))):
        # Something else was written at our key: skipped. Any other error (no permission,
        # cluster down) is the server refusing, not an empty memory.
        for part, reply in zip(_PARTS, replies, strict=False):
            if isinstance(reply, Exception):
                if not _wrong_type(reply):
                    raise _refused(reply)
                bad.append(Corrupt(part, f"unreadable: {error_text(reply)}"))
        ctx, summary, recent_records, meta = (
            None if isinstance(r, Exception) else r for r in (ctx, summary, recent_records, meta)
        )
    context, earlier, facts = _decode_context(ctx or [], config, bad)
    recent = _decode_recent(recent_records or [], bad)
    lines = _decode_summary(summary or [], config)
    if not config.summary.cover_recent:
        # The last lines belong to turns still shown in full in the recent window.
        lines = lines[: max(len(lines) - len(recent) // 2, 0)]
    meta = meta or {}
    state = built(
        SessionState,
        session_id=session_id,
        context=context,
        earlier=earlier,
        summary=lines[-config.summary.lines :] if config.summary.lines else [],
        recent=[{"role": m.role, "content": m.content} for m in recent],
        recent_tokens=tuple(m.tokens for m in recent),
        pairs=tuple(recent) if all(m.tokens >= 0 for m in recent) else None,
        turns=_meta_number(meta, "turns", int, bad) or 0,
        full_tokens=_meta_number(meta, "full_tokens", int, bad) or 0,
        created_at=_meta_number(meta, "created", float, bad),
        updated_at=_meta_number(meta, "updated", float, bad),
        owner=_owner(meta),
        notes="",
        facts=facts,
        tool_uses=_tool_uses(meta, bad),
    )
    missing = _missing((ctx, summary, recent_records, meta), state.turns, config, bad)
    if "meta" in missing:  # no count: what is left tells at least how many turns there were
        state = dataclasses.replace(state, turns=max(len(summary or ()), len(recent) // 2))
    return Loaded(state, tuple(bad), missing)


# The reads of a load, and the archive's best pieces for a query, in one script: the
# query's terms are looked up in the index, each piece scored by the rare terms it
# shares (BM25's idf, weighted per term), skipping turns out of the archive and the turns
# the recent window shows in full; of the pieces holding a term of the current message
# itself (weight 1: the recent window's terms only rank), the CANDIDATES best come back
# with their text.
#
# KEYS: ctx sum recent meta arc idx. ARGV: archive_turns recent_turns candidates n_terms query min_score scan common
# (query: "term weight term weight ..." in one argument, which costs the client less to
# send than two arguments a term; scan: the bytes read of each term's ids, the newest; common: how many terms whose
# ids fill them are read)
# Returns {ctx (member score)*, summary, recent, meta (field value)*, {id score asked matched record}*}
# (asked: the score of the current message's own terms);
# a read that fails stands as its error in its place.
LOAD_SCRIPT = r"""
local ctx, sum, recent, meta, arc, idx = unpack(KEYS, 1, 6)
local out = {redis.pcall('ZRANGE', ctx, 0, -1, 'WITHSCORES'), redis.pcall('LRANGE', sum, 0, -1),
             redis.pcall('LRANGE', recent, 0, -1), redis.pcall('HGETALL', meta), {}}
local n_terms = tonumber(ARGV[4])
if n_terms == 0 or out[4].err then return out end
local turns = 0
for i = 1, #out[4], 2 do
  if out[4][i] == 'turns' then turns = tonumber(out[4][i + 1]) or 0 end
end
local oldest, newest = turns - tonumber(ARGV[1]) + 1, turns - tonumber(ARGV[2])
if newest < 1 then return out end
local terms, weights = {}, {}
for term, weight in string.gmatch(ARGV[5], '(%S+) (%S+)') do
  terms[#terms + 1] = term
  weights[#weights + 1] = tonumber(weight)
end
if #terms ~= n_terms then return redis.error_reply('ERR the query holds ' .. #terms .. ' terms, not ' .. n_terms) end
local lists = redis.pcall('HMGET', idx, unpack(terms))
local size = redis.pcall('HLEN', arc)
if lists.err or type(size) ~= 'number' then return out end
-- A piece's score is the sum of the weights of the message's terms it holds, so it
-- follows from which terms those are (its mask): the masks are ranked, not the pieces,
-- and a table.sort over every piece (most of a recall's time in Lua) is not needed.
local mask, order, idf, upper = {}, {}, {}, newest + 1
local scan, common = tonumber(ARGV[7]), tonumber(ARGV[8])
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
        end
      elseif m and m % above < bit then  -- once per term
        mask[id], n = m + bit, n + 1
      end
    end
  end
  idf[j] = weights[j] * math.log(1 + (size - n + 0.5) / (n + 0.5))
end
-- Each mask's pieces, newest first: `order` holds each term's new ids oldest first, so
-- read backwards it gives every mask its pieces newest first. Only the current
-- message's own terms (weight 1) select, above the floor; the others rank.
local floor, groups, score, asked, masks = tonumber(ARGV[6]), {}, {}, {}, {}
for i = #order, 1, -1 do
  local id = order[i]
  local m = mask[id]
  local group = groups[m]
  if group == nil then
    local total, own, selects, rest, k = 0, 0, false, m, 1
    while rest > 0 do  -- up to its last term only
      local held = rest % 2
      if held == 1 then
        total = total + idf[k]
        if weights[k] >= 1 then own, selects = own + idf[k], true end
      end
      rest, k = (rest - held) / 2, k + 1
    end
    group, score[m], asked[m] = {}, total, own
    groups[m] = group
    if selects and own >= floor then masks[#masks + 1] = m end
  end
  group[#group + 1] = id
end
if #masks == 0 then return out end
-- Best masks first; pieces of masks that score the same, newest first among them (a turn's
-- pieces: the last first). A term's ids are in the order they were written, newest last.
table.sort(masks, function(a, b) return score[a] > score[b] end)
local best, limit, i = {}, 2 * tonumber(ARGV[3]), 1
while i <= #masks and #best < limit do
  local tied = {masks[i]}
  while i + #tied <= #masks and score[masks[i + #tied]] == score[masks[i]] do tied[#tied + 1] = masks[i + #tied] end
  local ids = groups[tied[1]]
  if #tied > 1 then
    ids = {}
    for _, m in ipairs(tied) do
      for _, id in ipairs(groups[m]) do ids[#ids + 1] = id end
    end
    table.sort(ids, function(a, b)  -- as within a mask: newest turn first, then its last piece first
      local ta, na = string.match(a, '^(%d+)%.(%d+)$')
      local tb, nb = string.match(b, '^(%d+)%.(%d+)$')
      ta, na, tb, nb = tonumber(ta) or 0, tonumber(na) or 0, tonumber(tb) or 0, tonumber(nb) or 0
      if ta ~= tb then return ta > tb end
      return na > nb
    end)
  end
  for _, id in ipairs(ids) do
    if #best == limit then break end
    best[#best + 1] = id
  end
  i = i + #tied
end
-- Read in turn only as many as are still wanted: most texts are not repeats, so one read of
-- `candidates` records usually does.
local wanted, row, seen, names_of, at = tonumber(ARGV[3]), out[5], {}, {}, 1
local sent = 0
while sent < wanted and at <= #best do
  local batch = {}
  for k = at, math.min(at + wanted - sent - 1, #best) do batch[#batch + 1] = best[k] end
  at = at + #batch
  local records = redis.pcall('HMGET', arc, unpack(batch))
  if records.err then return out end
  for i, id in ipairs(batch) do
    -- The same text from another turn says nothing new: one of each, at most `candidates`.
    -- Anchored at the start (as Python splits it, the text is what follows the third tab):
    -- an unanchored '[^\t]*$' retries from every position and costs several µs a record.
    local text = records[i] and string.match(records[i], '^[^\t]*\t[^\t]*\t[^\t]*\t(.*)$')
    if text and not seen[text] then
      seen[text], sent = true, sent + 1
      local m = mask[id]
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
      row[#row + 1] = tostring(score[m])
      row[#row + 1] = tostring(asked[m])
      row[#row + 1] = names
      row[#row + 1] = records[i]
    end
  end
end
return out
"""
LOAD_SHA = hashlib.sha1(LOAD_SCRIPT.encode()).hexdigest()


def _load_script(layout: Layout, keys: SessionKeys, query: Sequence[tuple[str, float]]) -> Command:
    recent_turns = layout.recent_messages // 2
    return (
        "evalsha", LOAD_SHA, 6, keys.ctx, keys.sum, keys.recent, keys.meta, keys.arc, keys.idx,
        layout.archive_turns, recent_turns, CANDIDATES, len(query), query_argument(query), MIN_SCORE, POSTINGS, COMMON_TERMS,
    )  # fmt: skip


def query_argument(query: Sequence[tuple[str, float]]) -> str:
    """The load script's query, "term weight term weight ...": terms are words (no spaces)."""
    text = " ".join(f"{term} {_WEIGHTS.get(weight) or repr(float(weight))}" for term, weight in query)
    if len(text.split()) != 2 * len(query):
        raise ValueError(
            f"recall query of {len(query)} terms: a term is empty or holds whitespace; expected words as terms_of gives"
        )
    return text


_WEIGHTS = {1.0: "1", 0.5: "0.5"}  # the two weights query_terms gives, spelt once


def _pairs(flat: Any) -> Any:
    """A script's flat [a, b, a, b...] reply as the pipeline would give it: [(a, b)...]."""
    return flat if isinstance(flat, Exception) else [(flat[i], float(flat[i + 1])) for i in range(0, len(flat), 2)]


def _mapping(flat: Any) -> Any:
    return flat if isinstance(flat, Exception) else {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}


def _merged(lexical: Sequence[Candidate], near: Sequence[Candidate]) -> tuple[Candidate, ...]:
    """One candidate per piece: a piece both searches found keeps its lexical score and
    gains its similarity."""
    similar = {(c.turn, c.text): c.similarity for c in near}
    merged = [c._replace(similarity=similar.pop((c.turn, c.text), 0.0)) for c in lexical]
    return (*merged, *(c for c in near if (c.turn, c.text) in similar))


def _candidates(flat: Any) -> tuple[Candidate, ...]:
    found = []
    for i in range(0, len(flat) - 4, 5):
        piece_id, score, asked, matched, record = flat[i : i + 5]
        kind, tokens, terms, text = [*_text(record).split("\t", 3), "", "", ""][:4]
        if text and tokens.isdigit():
            turn = int(_text(piece_id).partition(".")[0])
            # Positional: a NamedTuple's keyword constructor costs more.
            found.append(Candidate(turn, kind, text, int(tokens), float(score), tuple(_text(matched).split()),
                                   tuple(terms.split()), 0.0, float(asked)))  # fmt: skip
    return tuple(found)


def load(
    layout: Layout,
    session_id: str,
    *,
    owner: tuple[str, str] | None = None,
    query: Sequence[tuple[str, float]] = (),
    vector: Sequence[float] = (),
) -> Plan[Loaded]:
    """A session's state in one round trip. Its notes join the reads when ``owner`` (the
    owner the caller last saw) is given; a session whose owner turns out different
    takes a second round trip for them. With a ``query`` (terms and weights), the
    archive's best pieces for it come back too (``Loaded.candidates``), and with a
    ``vector`` (the current message's embedding) the nearest pieces, from the server's
    vector index, in the same round trip."""
    notes_shown, keys = layout.notes_shown, layout.session(session_id)
    recall = bool(query) and layout.recall
    commands = (_load_script(layout, keys, query),) if recall else load_commands(keys)
    if owner is not None and notes_shown:
        commands = (*commands, ("get", layout.pair(*owner).notes))
    if vector:
        commands = (*commands, vector_search(layout, session_id, vector))
    replies = yield Batch(commands)
    if vector:
        near, replies = nearest(replies[-1]), replies[:-1]
    candidates: tuple[Candidate, ...] = ()
    if recall:
        if _no_script(replies[0]):
            replies = yield Batch([("eval", LOAD_SCRIPT, *commands[0][2:]), *commands[1 : len(replies)]])
        script, *rest = replies
        if isinstance(script, Exception):
            raise _refused(script)
        ctx, summary, recent, meta, found = script
        replies = [_pairs(ctx), summary, recent, _mapping(meta), *rest]
        candidates = _candidates(found)
    loaded = decode_state(session_id, replies, layout.config)
    if vector:  # the index may still hold vectors of turns out of the archive: they are not recalled
        oldest = loaded.state.turns - layout.archive_turns + 1
        candidates = _merged(candidates, [c for c in near if c.turn >= oldest])
    loaded = loaded._replace(candidates=candidates)
    if "meta" in loaded.missing:  # the ids of the last turns carry the count the meta hash lost
        (last,) = yield Batch([("zrange", keys.ids, -1, -1, False, True)])
        counted = int(last[0][1]) if isinstance(last, list) and last else 0
        loaded = loaded._replace(state=dataclasses.replace(loaded.state, turns=max(loaded.state.turns, counted)))
    found_owner = loaded.state.owner
    if found_owner is None or not notes_shown:
        return loaded
    if found_owner == owner:
        text = _text_or_empty(_checked(replies[_LOAD_REPLIES:])[0])
    else:
        text = yield from notes(layout, *found_owner)
    return loaded._replace(state=dataclasses.replace(loaded.state, notes=text))


# --- semantic recall: the server's own vector index --------------------------------


def vector_prefix(layout: Layout, session_id: str) -> str:
    """Where a session's piece vectors live: under the session's hash tag, behind a
    prefix of their own that the vector index covers."""
    return f"{layout.prefix}:v:{{{_escape_tag(session_id)}}}:"


def vector_tag(session_id: str) -> str:
    """The session as the index's tag field holds it: hex, so no id needs escaping."""
    return hashlib.sha1(session_id.encode()).hexdigest()[:20]


def vector_index_name(layout: Layout, dimensions: int) -> str:
    return f"{layout.prefix}:vectors:{dimensions}"


def encode_vector(vector: Sequence[float]) -> bytes:
    return struct.pack(f"<{len(vector)}f", *vector)


def vector_index(layout: Layout, dimensions: int) -> Plan[bool]:
    """Make the vector index for ``dimensions`` (kept if there); False when the server
    has no query engine (Redis 7 without modules, the embedded store) or is a cluster."""
    if layout.cluster:
        return False
    (reply,) = yield Batch([(
        "execute_command", "FT.CREATE", vector_index_name(layout, dimensions), "ON", "HASH", "PREFIX", "1",
        f"{layout.prefix}:v:", "SCHEMA", "s", "TAG", "turn", "NUMERIC", "vec", "VECTOR", "HNSW", "6",
        "TYPE", "FLOAT32", "DIM", str(dimensions), "DISTANCE_METRIC", "COSINE",
    )])  # fmt: skip
    return not isinstance(reply, Exception) or "already exists" in error_text(reply).lower()


def vector_search(layout: Layout, session_id: str, vector: Sequence[float], *, count: int = CANDIDATES) -> Command:
    """The session's pieces nearest ``vector`` (those the recent window shows are dropped by the caller)."""
    query = f"(@s:{{{vector_tag(session_id)}}})=>[KNN {count} @vec $q AS dist]"
    return ("execute_command", "FT.SEARCH", vector_index_name(layout, len(vector)), query, "PARAMS", "2", "q",
            encode_vector(vector), "RETURN", "3", "rec", "turn", "dist", "SORTBY", "dist", "LIMIT", "0", str(count),
            "DIALECT", "2")  # fmt: skip


def _search_rows(reply: Any) -> list[dict[str, Any]]:
    """FT.SEARCH's documents as field dicts, from a RESP2 array or a RESP3 map."""
    if isinstance(reply, dict):
        results = reply.get(b"results", reply.get("results")) or []
        rows = [r.get(b"extra_attributes", r.get("extra_attributes")) or {} for r in results if isinstance(r, dict)]
        return [{_text(k): v for k, v in row.items()} for row in rows]
    if isinstance(reply, list):
        return [{_text(f[i]): f[i + 1] for i in range(0, len(f) - 1, 2)} for f in reply[2::2] if isinstance(f, list)]
    return []


def nearest(reply: Any) -> tuple[Candidate, ...]:
    """The pieces a vector search found, their score the cosine similarity."""
    found = []
    for row in _search_rows(reply):
        kind, tokens, terms, text = [*_text(row.get("rec", b"")).split("\t", 3), "", "", ""][:4]
        turn, distance = _text(row.get("turn", b"0")), _text(row.get("dist", b"2"))
        if text and tokens.isdigit() and turn.isdigit():
            found.append(Candidate(int(turn), kind, text, int(tokens), 0.0, (), tuple(terms.split()), 1.0 - float(distance)))
    return tuple(found)


# --- record ------------------------------------------------------------------

# One turn, written by one server-side script: atomic, idempotent by turn id, and with
# the bounds that need to look at what is stored (the newest values per context key, the
# keys set most recently, the archive's oldest turn) applied where the data is, so no
# writer reads and writes back.
#
# KEYS: the session's keys in SessionKeys order (ctx sum recent meta traces prompt ids arc
#       idx), then the listing index unless on a cluster.
# ARGV: turn_id now ttl_ms full_tokens max_keys key_history summary_lines recent_messages
#       trace_entries turn_ids session_id index_cutoff summary_line trace prompt
#       archive_turns postings vector_prefix vector_tag
#       n_context (key value)*n_context  n_recent record*n_recent
#       n_pieces (kind tokens terms facts text vector)*n_pieces  tool_window n_tools tool*n_tools
# With semantic recall each piece with a vector also gets a hash of its own,
# <vector_prefix><turn>.<n> = {s: vector_tag, turn, vec, rec}, which the server's vector
# index covers (declared keys aside: semantic recall runs only outside a cluster).
# Returns {turns, written (1, or 0 when the turn id was already recorded), repaired...}.
#
# Context members are "key=value" scored turn * 1000 + position: the newest value of a key
# is its current one, and the score tells the turn that set each value. The archive holds
# pieces "<turn>.<n>" -> "kind<TAB>tokens<TAB>facts<TAB>text" (facts: the terms of what it
# says, rather than of the names it says them with); the index maps each term to the ids
# of the pieces holding it, newest last, at most `postings` of them.
RECORD_SCRIPT = r"""
local ctx, sum, recent, meta, traces, prompt, ids, arc, idx = unpack(KEYS, 1, 9)
local turn_id, repaired = ARGV[1], {}
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

-- The newest `cap` ids of a space-separated list.
-- The newest ids of a space-separated list, in at most `cap` bytes: past twice that it is
-- cut back to `cap` at an id boundary, so a write seldom scans the list.
local function newest(list, cap)
  if #list <= 2 * cap then return list end
  local at = string.find(list, ' ', #list - cap, true)
  return at and string.sub(list, at + 1) or list
end

local function record()
if turn_id ~= '' and call('ZSCORE', ids, turn_id) then
  return {tonumber(redis.pcall('HGET', meta, 'turns')) or 0, 0}
end

local now, ttl = ARGV[2], tonumber(ARGV[3])
local max_keys, history = tonumber(ARGV[5]), tonumber(ARGV[6])
if redis.call('EXISTS', meta) == 0 then  -- evicted, or a new session: count on from the last turn id
  local last = call('ZRANGE', ids, -1, -1, 'WITHSCORES')
  if last[2] then call('HSET', meta, 'turns', last[2]) end
end
local turns = call('HINCRBY', meta, 'turns', 1)
call('HINCRBY', meta, 'full_tokens', ARGV[4])
call('HSETNX', meta, 'created', now)
call('HSET', meta, 'updated', now, 'last_turn', turn_id)

local n_context, at = tonumber(ARGV[20]), 21
if n_context > 0 then
  -- Values written by an earlier version carry a clock in microseconds: give them turn scores.
  local legacy = call('ZRANGEBYSCORE', ctx, '1e12', '+inf')
  for rank, member in ipairs(legacy) do call('ZADD', ctx, (turns - 1) * 1000 + rank, member) end
  for i = 0, n_context - 1 do
    call('ZADD', ctx, turns * 1000 + i, ARGV[at + 2 * i] .. '=' .. ARGV[at + 2 * i + 1])
  end
  -- Keep the newest `history` values of each key, and the `max_keys` keys set last.
  local rank, count, drop = {}, {}, {}
  for _, member in ipairs(call('ZREVRANGE', ctx, 0, -1)) do
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

local keep = tonumber(ARGV[7])
if keep > 0 then
  call('RPUSH', sum, ARGV[13])
  call('LTRIM', sum, -keep, -1)
end
local n_recent = tonumber(ARGV[at])
keep = tonumber(ARGV[8])
if keep > 0 and n_recent > 0 then
  call('RPUSH', recent, unpack(ARGV, at + 1, at + n_recent))
  call('LTRIM', recent, -keep, -1)
end
at = at + 1 + n_recent
keep = tonumber(ARGV[9])
if keep > 0 and ARGV[14] ~= '' then
  call('RPUSH', traces, ARGV[14])
  call('LTRIM', traces, -keep, -1)
end
if ARGV[15] ~= '' then call('SET', prompt, ARGV[15]) end
if turn_id ~= '' then
  call('ZADD', ids, turns, turn_id)
  call('ZREMRANGEBYRANK', ids, 0, -tonumber(ARGV[10]) - 1)
end

local archive, cap, n_pieces, vectors = tonumber(ARGV[16]), tonumber(ARGV[17]), tonumber(ARGV[at]), ARGV[18]
if archive > 0 then
  if n_pieces > 0 then
    local fields, postings, terms = {}, {}, {}
    for i = 0, n_pieces - 1 do
      local base, id = at + 1 + 6 * i, turns .. '.' .. i
      local record = ARGV[base] .. '\t' .. ARGV[base + 1] .. '\t' .. ARGV[base + 3] .. '\t' .. ARGV[base + 4]
      fields[#fields + 1] = id
      fields[#fields + 1] = record
      if vectors ~= '' and ARGV[base + 5] ~= '' then  -- semantic recall: the piece's vector, for the server's index
        local key = vectors .. id
        redis.call('HSET', key, 's', ARGV[19], 'turn', turns, 'vec', ARGV[base + 5], 'rec', record)
        if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
      end
      for term in string.gmatch(ARGV[base + 2], '%S+') do
        if postings[term] == nil then
          postings[term] = id
          terms[#terms + 1] = term
        else
          postings[term] = postings[term] .. ' ' .. id
        end
      end
    end
    call('HSET', arc, unpack(fields))
    if #terms > 0 then
      local lists, updates = call('HMGET', idx, unpack(terms)), {}
      for j, term in ipairs(terms) do
        local list = lists[j] and (lists[j] .. ' ' .. postings[term]) or postings[term]
        updates[#updates + 1] = term
        updates[#updates + 1] = newest(list, cap)
      end
      call('HSET', idx, unpack(updates))
    end
  end
  local gone = turns - archive  -- the turn that falls out of the archive now
  if gone >= 1 then
    -- Its pieces go, and those of older turns a few pieces picked at random belong to:
    -- turns kept while the archive was longer (archive_turns lowered) go a few at a time.
    local turns_gone, seen = {gone}, {[gone] = true}
    local picked = call('HRANDFIELD', arc, 4)
    if type(picked) ~= 'table' then picked = {} end
    for _, id in ipairs(picked) do
      local t = tonumber(string.match(id, '^(%d+)%.'))
      if t and t < gone and not seen[t] then
        seen[t] = true
        turns_gone[#turns_gone + 1] = t
      end
    end
    for _, t in ipairs(turns_gone) do
      local old, keys = {}, {}
      for n = 0, 31 do
        old[#old + 1] = t .. '.' .. n
        keys[#keys + 1] = vectors .. t .. '.' .. n
      end
      call('HDEL', arc, unpack(old))
      if vectors ~= '' then redis.call('DEL', unpack(keys)) end
    end
  end
  -- Sweep: a few terms at random; one whose newest piece fell out of the archive goes.
  local sample = call('HRANDFIELD', idx, 3, 'WITHVALUES')
  if type(sample) ~= 'table' then sample = {} end  -- a missing key: an empty array (nil in some servers)
  for i = 1, #sample, 2 do
    local last = tonumber(string.match(sample[i + 1], '(%d+)%.%d+$'))
    if last and last <= gone then call('HDEL', idx, sample[i]) end
  end
else
  call('UNLINK', arc, idx)  -- archive_turns 0 keeps none: what an earlier setting kept goes
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
    call('HSET', meta, field, (order or tostring(turns * 1000 + i)) .. ' ' .. turns)
  end
  local fields = call('HGETALL', meta)
  for i = 1, #fields, 2 do
    if string.sub(fields[i], 1, 2) == 't:' then
      local last = tonumber(string.match(fields[i + 1], ' (%d+)$') or '0')
      if turns - last >= window then call('HDEL', meta, fields[i]) end
    end
  end
end

for i = 1, 9 do
  if ttl > 0 then call('PEXPIRE', KEYS[i], ttl) else call('PERSIST', KEYS[i]) end
end
if KEYS[10] then  -- the listing index: best effort, never fails the turn
  redis.pcall('ZADD', KEYS[10], now, ARGV[11])
  if ARGV[12] ~= '' then redis.pcall('ZREMRANGEBYSCORE', KEYS[10], '-inf', ARGV[12]) end
end
return {turns, 1, unpack(repaired)}
end

local ok, result = pcall(record)
if ok then return result end
if type(result) == 'table' and result.err then return result end
return redis.error_reply(tostring(result))
"""
RECORD_SHA = hashlib.sha1(RECORD_SCRIPT.encode()).hexdigest()


def recorded_keys(keys: SessionKeys) -> tuple[str, ...]:
    """The keys RECORD_SCRIPT writes, in SessionKeys order: all but the endpoint's ``live`` hash."""
    return tuple(key for name, key in zip(SessionKeys._fields, keys, strict=True) if name != "live")


def record_command(layout: Layout, session_id: str, update: TurnUpdate, *, now: float, vectors: Sequence[bytes] = ()) -> Command:
    """The one command that records a turn: the script by its SHA (see ``record``);
    ``vectors``: one encoded vector per piece, for semantic recall."""
    keys = recorded_keys(layout.session(session_id))
    index = () if layout.cluster else (layout.index,)
    cutoff = repr(now - layout.ttl_ms / 1000) if layout.ttl_ms and not layout.cluster else ""
    recent = [_dumps({"role": m.role, "content": m.content, "tokens": m.tokens, "turn": update.turn_id}) for m in update.recent]
    # One record per turn (its events in order): one encode, one list element.
    trace = _dumps({"ts": now, "turn_id": update.turn_id, "events": update.traces}) if update.traces else ""
    pieces = update.pieces if layout.archive_turns else ()
    blobs = list(vectors) if len(vectors) == len(pieces) else [b""] * len(pieces)
    # With semantic recall the prefix goes with every write, vectors or not, so the vectors of
    # turns that leave the archive go with them (a cluster has no vector index).
    semantic = any(blobs) or (layout.config.memory.recall == "semantic" and not layout.cluster)
    prefix, tag = (vector_prefix(layout, session_id), vector_tag(session_id)) if semantic else ("", "")
    return (
        "evalsha", RECORD_SHA, len(keys) + len(index), *keys, *index,
        update.turn_id, repr(now), layout.ttl_ms, update.full_tokens, layout.max_keys,
        layout.key_history, layout.summary_lines, layout.recent_messages if update.recent else 0, layout.trace_entries,
        layout.turn_ids, session_id, cutoff, update.summary_line, trace, update.prompt, layout.archive_turns, POSTINGS,
        prefix, tag,
        len(update.context), *(part for pair in update.context for part in pair), len(recent), *recent,
        len(pieces), *(part for p, blob in zip(pieces, blobs, strict=True)
                       for part in (p.kind, p.tokens, " ".join(p.terms), " ".join(p.facts), p.text, blob)),
        layout.tool_window, len(update.tools) if layout.tool_window else 0, *(update.tools if layout.tool_window else ()),
    )  # fmt: skip


def index_commands(layout: Layout, session_id: str, *, now: float) -> list[Command]:
    """Keep the listing index: this session's last update; forget sessions past their TTL."""
    commands: list[Command] = [("zadd", layout.index, {session_id: now})]
    if layout.ttl_ms:
        commands.append(("zremrangebyscore", layout.index, "-inf", now - layout.ttl_ms / 1000))
    return commands


class Recorded(NamedTuple):
    turns: int  # the session's turn count after this turn
    written: bool = True  # False: this turn id had been recorded already (a retry whose first reply was lost)
    repaired: tuple[str, ...] = ()  # keys that held a foreign type, and "key field" counters that held no integer
    index_error: str = ""  # the listing index could not be written (a cluster node down): the turn is


def _no_script(reply: Any) -> bool:
    """The server does not have the script yet (redis-py strips the NOSCRIPT prefix)."""
    return isinstance(reply, Exception) and (type(reply).__name__ == "NoScriptError" or "NOSCRIPT" in error_text(reply))


def record(layout: Layout, session_id: str, update: TurnUpdate, *, now: float, vectors: Sequence[bytes] = ()) -> Plan[Recorded]:
    """Write one turn: one script, run by its SHA (a server that has not seen it yet gets
    it once). Idempotent by ``update.turn_id``: a retry whose first attempt did land (its
    reply lost) writes nothing and says so. On a cluster the listing index, in another
    slot, follows in a round trip of its own that never fails the turn."""
    command = record_command(layout, session_id, update, now=now, vectors=vectors)
    (reply,) = yield Batch([command])
    if _no_script(reply):
        (reply,) = yield Batch([("eval", RECORD_SCRIPT, *command[2:])])
    turns, written, *repaired = _checked([reply])[0]
    recorded = Recorded(int(turns), bool(written), tuple(map(_text, repaired)))
    if layout.cluster and written:
        try:
            replies = yield Batch(index_commands(layout, session_id, now=now))
            failed: BaseException | None = next((r for r in replies if isinstance(r, Exception)), None)
        except StoreError as exc:
            failed = exc
        if failed is not None:
            recorded = recorded._replace(index_error=error_text(failed))
    return recorded


def reset(layout: Layout, session_id: str) -> Plan[None]:
    """Delete every key of the session and its index entry."""
    keys = layout.session(session_id)
    yield Batch([("delete", key) for key in keys], transaction=not layout.cluster)
    yield Batch([("zrem", layout.index, session_id)])


# --- users, agents and notes ---------------------------------------------------------------


def resolve_session(layout: Layout, user_id: str, agent: str, *, candidate: str, now: float, new: bool = False) -> Plan[str]:
    """The pair's active session; ``candidate`` becomes it when there is none (or, with
    ``new``, in any case). HSETNX settles a race between two first calls; HGET says who won."""
    pair, ttl = layout.pair(user_id, agent), layout.ttl_ms
    if not new:
        commands: list[Command] = [
            ("hsetnx", pair.active, "session_id", candidate),
            ("hsetnx", pair.active, "created", repr(now)),
            ("hset", pair.active, "last_active", repr(now)),
            ("hget", pair.active, "session_id"),
        ]
        replies = _checked((yield Batch([*commands, *([("pexpire", pair.active, ttl)] if ttl else [])], transaction=True)))
        winner = _text(replies[3])
        if winner != candidate:
            return winner
    activate: list[Command] = [
        ("hset", pair.active, None, None, {"session_id": candidate, "created": repr(now), "last_active": repr(now)}),
        ("zadd", pair.sessions, {candidate: now}),
    ]
    if ttl:
        activate += [("pexpire", pair.active, ttl), ("pexpire", pair.sessions, ttl)]
    _checked((yield Batch(activate, transaction=True)))
    meta = layout.session(candidate).meta
    owner: list[Command] = [
        ("hset", meta, None, None, {"user": user_id, "agent": agent}),
        *([("pexpire", meta, ttl)] if ttl else []),
    ]
    _checked((yield Batch(owner)))
    return candidate


def pair_sessions(layout: Layout, user_id: str, agent: str) -> Plan[list[tuple[str, float]]]:
    """The pair's sessions, newest first, with their creation times."""
    (rows,) = _checked((yield Batch([("zrevrange", layout.pair(user_id, agent).sessions, 0, -1, True)])))
    return [(_text(member), score) for member, score in rows or ()]


def notes(layout: Layout, user_id: str, agent: str) -> Plan[str]:
    """The pair's notes ("" when there are none)."""
    (value,) = _checked((yield Batch([("get", layout.pair(user_id, agent).notes)])))
    return _text_or_empty(value)


# Set the notes only if they are still what the edit read (compare and set), and file the
# edit's id. An edit whose id is filed already counts as written: redis-py sends a script
# again when its reply is lost, and that second run must not find the notes changed (by
# itself, or by another writer in between) and have the edit read and applied again.
# KEYS: notes edits. ARGV: what the edit read, what it writes, its id, ids kept.
_NOTES_CAS = """
local kind = redis.call('TYPE', KEYS[2])['ok']
if kind == 'list' then
  for _, done in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
    if done == ARGV[3] then return 1 end
  end
elseif kind ~= 'none' then
  redis.call('DEL', KEYS[2])  -- something else was written there: replaced
end
if (redis.call('GET', KEYS[1]) or '') ~= ARGV[1] then return 0 end
if ARGV[2] == '' then redis.call('DEL', KEYS[1]) else redis.call('SET', KEYS[1], ARGV[2]) end
redis.call('LPUSH', KEYS[2], ARGV[3])
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[4]) - 1)
return 1
"""
_NOTES_ATTEMPTS = 50
# Edits whose ids the notes keep: a resent edit is recognised if fewer than this many others landed since.
NOTES_EDIT_IDS = 32


def edit_notes(layout: Layout, user_id: str, agent: str, edit: Callable[[str], str], *, edit_id: str) -> Plan[str]:
    """Apply ``edit`` to the notes atomically: read, edit, then set only if no other writer
    changed them in between (else read again). ``edit_id``, unique to this edit, makes a
    resent write count once."""
    keys = layout.pair(user_id, agent)
    for _ in range(_NOTES_ATTEMPTS):
        (value,) = _checked((yield Batch([("get", keys.notes)])))
        current = _text_or_empty(value)
        updated = edit(current)
        cas = ("execute_command", "EVAL", _NOTES_CAS, 2, keys.notes, keys.edits, current, updated, edit_id, NOTES_EDIT_IDS)
        (written,) = _checked((yield Batch([cas])))
        if written:
            return updated
    raise StoreError(f"The notes of ({user_id!r}, {agent!r}) changed under {_NOTES_ATTEMPTS} edits in a row; try again.")


# --- listing and inspection ------------------------------------------------------------------


_GLOB_SPECIAL = str.maketrans({c: f"\\{c}" for c in "*?[]\\"})


# Beyond this a page's offset no longer fits a Redis range: refused, not sent to fail there.
MAX_PAGE = 1_000_000_000


def page_bounds(page: int, page_size: int) -> tuple[int, int]:
    """Page clamped to at least 1 and size to 1..200; returns (page, size)."""
    if int(page) > MAX_PAGE:
        raise InvalidInputError(f"Page {quoted(int(page), 40)} is out of range; expected a page number up to {MAX_PAGE:,}.")
    return max(1, int(page)), min(max(1, int(page_size)), 200)


def _index_page(layout: Layout, search: str | None, page: int, page_size: int) -> Plan[tuple[list[tuple[str, float]], int]]:
    start = (page - 1) * page_size
    if not search:
        total, rows = _checked(
            (yield Batch([("zcard", layout.index), ("zrevrange", layout.index, start, start + page_size - 1, True)]))
        )
        return [(_text(m), s) for m, s in rows], int(total)
    pattern, cursor, found = f"*{search.translate(_GLOB_SPECIAL)}*", 0, []
    while True:
        ((cursor, rows),) = _checked((yield Batch([("zscan", layout.index, cursor, pattern, 500)])))
        found += [(_text(m), s) for m, s in rows]
        if not int(cursor):
            break
    found.sort(key=lambda item: -item[1])
    return found[start : start + page_size], len(found)


def list_sessions(layout: Layout, *, search: str | None = None, page: int = 1, page_size: int = 20) -> Plan[SessionPage]:
    """Sessions newest first, optionally those whose id contains ``search``; ids the index
    holds but the store no longer does (expired, deleted) are dropped from it."""
    page, page_size = page_bounds(page, page_size)
    rows, total = yield from _index_page(layout, search, page, page_size)
    commands = [cmd for sid, _ in rows for cmd in load_commands(layout.session(sid))]
    replies = (yield Batch(commands)) if commands else []
    entries, stale = [], []
    for i, (sid, score) in enumerate(rows):
        state = decode_state(sid, replies[_LOAD_REPLIES * i : _LOAD_REPLIES * (i + 1)], layout.config).state
        if state.is_empty:
            stale.append(sid)
        else:
            entries.append(SessionSummary.of(state, score))
    if stale:
        yield Batch([("zrem", layout.index, *stale)])
    return SessionPage(entries=entries, total=total - len(stale), page=page, page_size=page_size)


@dataclass(frozen=True, slots=True)
class Inspection:
    """Everything stored for a session, as the inspector reads it."""

    state: SessionState
    traces: Any  # the raw trace records (or the error reply that stood in their place)
    prompt: Any  # the raw JSON of the last prompt, or None
    corrupt: tuple[Corrupt, ...] = ()


def inspect(layout: Layout, session_id: str, *, traces: int = 100) -> Plan[Inspection]:
    """The session's state, its last ``traces`` turn records and its last prompt, in one
    round trip (a second for the notes of a session with an owner)."""
    keys = layout.session(session_id)
    count = min(max(traces, 1), 100_000)  # no writer keeps more (traces.max_entries); a huge count fails in Redis
    replies = yield Batch([*load_commands(keys), ("lrange", keys.traces, -count, -1), ("get", keys.prompt)])
    loaded = decode_state(session_id, replies[:_LOAD_REPLIES], layout.config)
    state, corrupt = loaded.state, loaded.corrupt
    for reply in replies[_LOAD_REPLIES:]:  # a foreign trace or prompt key is the view's to warn about
        if isinstance(reply, Exception) and not _wrong_type(reply):
            raise _refused(reply)
    if state.owner:
        state = dataclasses.replace(state, notes=(yield from notes(layout, *state.owner)))
    return Inspection(state, replies[_LOAD_REPLIES], replies[_LOAD_REPLIES + 1], corrupt)


def eviction_policy(layout: Layout) -> Plan[str | None]:
    """The server's maxmemory-policy, or None where it will not say (CONFIG disabled or not
    permitted, or a cluster, whose nodes may differ). An unreachable server is an error."""
    if layout.cluster:
        return None
    (reply,) = yield Batch([("config_get", "maxmemory-policy")])
    value = reply.get("maxmemory-policy") if isinstance(reply, dict) else None
    return _text(value) if value is not None else None


def ping(layout: Layout) -> Plan[bool]:
    """True when the store answers (a read of the listing index: a keyed command, so a
    cluster routes it, where a pipelined PING is refused); StoreError when it does not."""
    _checked((yield Batch([("exists", layout.index)])))
    return True
