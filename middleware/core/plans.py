"""Every store operation as a plan: a generator that yields command batches and receives
their replies. No I/O: the drivers in ``middleware.store`` send the batches; tests feed
replies in by hand.

Layout (all keys of a session share the hash tag ``{<session id>}``, so a session lives
in one Redis Cluster slot)::

    <prefix>:{<sid>}:ctx      zset   member "key=value", score = µs time it was set
    <prefix>:{<sid>}:sum      list   summary lines, oldest first
    <prefix>:{<sid>}:recent   list   JSON {"role","content","tokens","turn"}: the recent window
    <prefix>:{<sid>}:meta     hash   turns, full_tokens, created, updated, last_turn, user, agent
    <prefix>:{<sid>}:traces   list   JSON turn records for the inspector
    <prefix>:{<sid>}:prompt   string JSON of the prompt sent on the last recorded turn
    <prefix>:{<sid>}:live     hash   the endpoint's turns in flight (see middleware.core.live)
    <prefix>:{u:<user>|<agent>}:active / :sessions / :notes   a (user, agent) pair
    <prefix>:sessions         zset   session id -> last update (seconds): the listing index

A load is one round trip. Recording a turn is one MULTI/EXEC made only of commands that
commute (pushes with trims, increments, sets): nothing is read and written back, so
concurrent writers lose nothing, and every write refreshes the TTL of the whole session.
Context values live in the zset member itself (key names never hold '='): a write adds
``key=value`` with a newer score and removes the members this process saw for that key;
a reader resolves any leftover duplicate by the highest score.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, NamedTuple

import orjson

from ..config import Config
from ..exceptions import StoreError
from .context import sanitize_key, sanitize_value
from .effects import Batch, Command, Plan
from .state import SessionPage, SessionState, SessionSummary, StoredMessage, TurnUpdate, built, whole_pairs
from .text import one_line

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
    live: str  # written by the endpoint only; here so that it expires and resets with the session


class PairKeys(NamedTuple):
    """The keys of one (user, agent) pair: its active session, its sessions and its notes."""

    active: str
    sessions: str
    notes: str


@functools.lru_cache(maxsize=65_536)
def session_keys(prefix: str, session_id: str) -> SessionKeys:
    """The keys of a session, built in this one place."""
    base = f"{prefix}:{{{_escape_tag(session_id)}}}"
    return SessionKeys(*(f"{base}:{name}" for name in SessionKeys._fields))


def pair_keys(prefix: str, user_id: str, agent: str) -> PairKeys:
    """The keys of a (user, agent) pair; '|' separates the two, so it is escaped inside them."""
    tag = "|".join(_escape_tag(part).replace("|", "%7C") for part in (user_id, agent))
    return PairKeys(*(f"{prefix}:{{u:{tag}}}:{name}" for name in PairKeys._fields))


@dataclass(frozen=True, slots=True)
class Layout:
    """How one config lays sessions out: key names, bounds and expiry, read once."""

    config: Config
    prefix: str
    index: str
    ctx_members: int  # members kept in the ctx zset (keys plus room for racing duplicates)
    summary_lines: int  # lines kept: those shown plus those of turns still in the recent window
    recent_messages: int
    trace_entries: int
    ttl_ms: int
    cluster: bool
    notes_shown: bool  # notes.max_tokens > 0: a load reads the notes

    @classmethod
    def of(cls, config: Config) -> Layout:
        shown, prefix = config.summary.lines, config.store.key_prefix
        return cls(
            config=config,
            prefix=prefix,
            index=f"{prefix}:sessions",
            ctx_members=config.context.max_keys * 2 + 8,
            summary_lines=shown + (0 if config.summary.cover_recent or not shown else config.recent.turns),
            recent_messages=config.recent.messages,
            trace_entries=config.traces.max_entries,
            ttl_ms=config.store.ttl_seconds * 1000,
            cluster=config.store.cluster,
            notes_shown=config.notes.max_tokens > 0,
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


def _not_integer(error: BaseException) -> bool:
    """A counter field holding something else: repaired field by field on write."""
    return "is not an integer" in error_text(error)


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


def _decode_context(reply: Any, config: Config, seen: dict[str, set[str]], bad: list[Corrupt]) -> dict[str, str]:
    best: dict[str, tuple[float, str]] = {}
    limit = config.context.max_value_chars
    for raw, score in reply:
        text = _text(raw)
        key, equals, value = text.partition("=")
        clean_key = sanitize_key(key)
        # Values were sanitized when written; a record written behind our back is re-sanitized.
        clean_value = (value if value.isprintable() and len(value) <= limit and value == value.strip() and value
                       else sanitize_value(value, limit)) if equals else None  # fmt: skip
        if clean_key is None or clean_value is None:
            bad.append(Corrupt("ctx", f"member {text[:80]!r} has an unusable key or value"))
            continue
        seen.setdefault(clean_key, set()).add(text)
        if clean_key not in best or score >= best[clean_key][0]:
            best[clean_key] = (score, clean_value)
    if config.context.keys is not None and not best.keys() <= set(config.context.keys):
        best = {k: v for k, v in best.items() if k in config.context.keys}
    if len(best) > config.context.max_keys:
        best = dict(sorted(best.items(), key=lambda item: item[1][0])[-config.context.max_keys :])
    return {key: value for key, (_, value) in best.items()}


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


def _owner(meta: Mapping[bytes, bytes]) -> tuple[str, str] | None:
    user, agent = meta.get(b"user"), meta.get(b"agent")
    if isinstance(user, bytes) and isinstance(agent, bytes):
        return user.decode("utf-8", "replace"), agent.decode("utf-8", "replace")
    return None


class Loaded(NamedTuple):
    state: SessionState
    seen: dict[str, set[str]]  # the context members read, per key (a later write supersedes them)
    corrupt: tuple[Corrupt, ...]  # records skipped


def decode_state(session_id: str, replies: Sequence[Any], config: Config) -> Loaded:
    """The state from the replies of ``load_commands`` (further replies are ignored); corrupt
    parts are skipped and listed."""
    seen: dict[str, set[str]] = {}
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
    context = _decode_context(ctx or [], config, seen, bad)
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
    )
    return Loaded(state, seen, tuple(bad))


def load(layout: Layout, session_id: str, *, owner: tuple[str, str] | None = None) -> Plan[Loaded]:
    """A session's state in one round trip. Its notes join the reads when ``owner`` (the
    owner the caller last saw) is given; a session whose owner turns out different
    takes a second round trip for them."""
    notes_shown = layout.notes_shown
    commands = load_commands(layout.session(session_id))
    if owner is not None and notes_shown:
        commands = (*commands, ("get", layout.pair(*owner).notes))
    replies = yield Batch(commands)
    loaded = decode_state(session_id, replies, layout.config)
    found = loaded.state.owner
    if found is None or not notes_shown:
        return loaded
    if found == owner:
        text = _text_or_empty(_checked(replies[_LOAD_REPLIES:])[0])
    else:
        text = yield from notes(layout, *found)
    return loaded._replace(state=dataclasses.replace(loaded.state, notes=text))


# --- record ------------------------------------------------------------------


def _member(key: str, value: str) -> str:
    return f"{key}={value}"


def record_commands(
    layout: Layout, session_id: str, update: TurnUpdate, *, now: float, superseded: Iterable[str] = ()
) -> list[Command]:
    """The commands of one recorded turn, all commutative, for one MULTI/EXEC. The listing
    index joins them except on a cluster, where it lives in another slot."""
    keys, now_us = layout.session(session_id), int(now * 1_000_000)
    commands: list[Command] = [
        ("hincrby", keys.meta, "turns", 1),  # first: its reply is the turn count
        ("hincrby", keys.meta, "full_tokens", update.full_tokens),
        ("hsetnx", keys.meta, "created", repr(now)),
        # hset(name, key, value, mapping): both fields in one command
        ("hset", keys.meta, None, None, {"updated": repr(now), "last_turn": update.turn_id}),
    ]
    scored: dict[str, int] = {}
    if update.context:
        for offset, (key, value) in enumerate(update.context):
            scored[_member(key, value)] = now_us + offset
        commands.append(("zadd", keys.ctx, scored))
    stale = [m for m in superseded if m not in scored]
    if stale:
        commands.append(("zrem", keys.ctx, *stale))
    if update.context:
        commands.append(("zremrangebyrank", keys.ctx, 0, -(layout.ctx_members + 1)))
    if layout.summary_lines:
        commands.append(("rpush", keys.sum, update.summary_line))
        commands.append(("ltrim", keys.sum, -layout.summary_lines, -1))
    if layout.recent_messages and update.recent:
        records = [
            _dumps({"role": m.role, "content": m.content, "tokens": m.tokens, "turn": update.turn_id}) for m in update.recent
        ]
        commands.append(("rpush", keys.recent, *records))
        commands.append(("ltrim", keys.recent, -layout.recent_messages, -1))
    if update.traces and layout.trace_entries:
        # One record per turn (its events in order): one encode, one list element.
        commands.append(("rpush", keys.traces, _dumps({"ts": now, "turn_id": update.turn_id, "events": update.traces})))
        commands.append(("ltrim", keys.traces, -layout.trace_entries, -1))
    if update.prompt:
        commands.append(("set", keys.prompt, update.prompt))
    ttl = layout.ttl_ms  # every write refreshes the whole session's idle expiry (0: none)
    commands += [("pexpire", key, ttl) for key in keys] if ttl else [("persist", key) for key in keys]
    if not layout.cluster:
        commands += index_commands(layout, session_id, now=now)
    return commands


def index_commands(layout: Layout, session_id: str, *, now: float) -> list[Command]:
    """Keep the listing index: this session's last update; forget sessions past their TTL."""
    commands: list[Command] = [("zadd", layout.index, {session_id: now})]
    if layout.ttl_ms:
        commands.append(("zremrangebyscore", layout.index, "-inf", now - layout.ttl_ms / 1000))
    return commands


class Recorded(NamedTuple):
    turns: int  # the session's turn count after this turn
    repaired: tuple[str, ...] = ()  # keys that held a foreign type, and "key field" counters that held no integer


def record(layout: Layout, session_id: str, update: TurnUpdate, *, now: float, superseded: Iterable[str] = ()) -> Plan[Recorded]:
    """Write one turn in one MULTI/EXEC. A key holding a foreign type is deleted and only
    its own commands replayed (every other command already applied once)."""
    commands = record_commands(layout, session_id, update, now=now, superseded=superseded)
    results = yield Batch(commands, transaction=True)
    turns, repaired = results[0], ()
    if any(map(isinstance, results, repeat(Exception))):
        errors = [(cmd, result) for cmd, result in zip(commands, results, strict=True) if isinstance(result, Exception)]
        refused = [error for cmd, error in errors if not _wrong_type(error) and not (_not_integer(error) and cmd[0] == "hincrby")]
        if refused:
            raise _refused(refused[0])
        bad = sorted({cmd[1] for cmd, error in errors if _wrong_type(error)})
        counters = [cmd for cmd, error in errors if _not_integer(error)]
        # A foreign key is deleted and its own commands replayed; a counter field that holds
        # no integer is deleted and its increment replayed (the rest of the hash stays).
        repair: list[Command] = [("delete", key) for key in bad] + [cmd for cmd in commands if cmd[1] in bad]
        repair += [("hdel", cmd[1], cmd[2]) for cmd in counters] + counters
        replies = yield Batch(repair, transaction=True)
        if commands[0] in repair:  # the turn counter itself was repaired
            turns = replies[repair.index(commands[0])]
        repaired = (*bad, *(f"{cmd[1]} {cmd[2]}" for cmd in counters))
    if layout.cluster:
        yield Batch(index_commands(layout, session_id, now=now))
    return Recorded(turns if isinstance(turns, int) else 0, repaired)


def _holds_turn(replies: Sequence[Any], turn_id: str) -> bool:
    last, recent = _checked(replies)
    if isinstance(last, bytes) and last.decode("utf-8", "replace") == turn_id:
        return True
    for entry in recent if isinstance(recent, list) else ():
        try:
            if _loads(entry).get("turn") == turn_id:
                return True
        except (ValueError, AttributeError):
            continue
    return False


def replay(
    layout: Layout, session_id: str, update: TurnUpdate, *, now: float, superseded: Iterable[str] = ()
) -> Plan[Recorded | None]:
    """Write a turn held through an outage, unless its first attempt did reach Redis (its
    reply was lost): then None. Exact unless other writers recorded two or more turns
    in the session since."""
    keys = layout.session(session_id)
    if update.turn_id:
        replies = yield Batch([("hget", keys.meta, "last_turn"), ("lrange", keys.recent, 0, -1)])
        if _holds_turn(replies, update.turn_id):
            return None
    return (yield from record(layout, session_id, update, now=now, superseded=superseded))


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


# Set the notes only if they are still what the edit read (compare and set, one key).
_NOTES_CAS = """
local current = redis.call('GET', KEYS[1]) or ''
if current ~= ARGV[1] then return 0 end
if ARGV[2] == '' then redis.call('DEL', KEYS[1]) else redis.call('SET', KEYS[1], ARGV[2]) end
return 1
"""
_NOTES_ATTEMPTS = 50


def edit_notes(layout: Layout, user_id: str, agent: str, edit: Callable[[str], str]) -> Plan[str]:
    """Apply ``edit`` to the notes atomically: read, edit, then set only if no other writer
    changed them in between (else read again)."""
    key = layout.pair(user_id, agent).notes
    for _ in range(_NOTES_ATTEMPTS):
        (value,) = _checked((yield Batch([("get", key)])))
        current = _text_or_empty(value)
        updated = edit(current)
        (written,) = _checked((yield Batch([("execute_command", "EVAL", _NOTES_CAS, 1, key, current, updated)])))
        if written:
            return updated
    raise StoreError(f"The notes of ({user_id!r}, {agent!r}) changed under {_NOTES_ATTEMPTS} edits in a row; try again.")


# --- listing and inspection ------------------------------------------------------------------


_GLOB_SPECIAL = str.maketrans({c: f"\\{c}" for c in "*?[]\\"})


def page_bounds(page: int, page_size: int) -> tuple[int, int]:
    """Page clamped to at least 1 and size to 1..200; returns (page, size)."""
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
    replies = yield Batch([*load_commands(keys), ("lrange", keys.traces, -max(traces, 1), -1), ("get", keys.prompt)])
    state, _, corrupt = decode_state(session_id, replies[:_LOAD_REPLIES], layout.config)
    for reply in replies[_LOAD_REPLIES:]:  # a foreign trace or prompt key is the view's to warn about
        if isinstance(reply, Exception) and not _wrong_type(reply):
            raise _refused(reply)
    if state.owner:
        state = dataclasses.replace(state, notes=(yield from notes(layout, *state.owner)))
    return Inspection(state, replies[_LOAD_REPLIES], replies[_LOAD_REPLIES + 1], corrupt)


def ping(layout: Layout) -> Plan[bool]:
    """True when the store answers (a read of the listing index: a keyed command, so a
    cluster routes it, where a pipelined PING is refused); StoreError when it does not."""
    _checked((yield Batch([("exists", layout.index)])))
    return True
