"""The session store: the only module that talks to Redis.

Layout (all keys of a session share the hash tag ``{<session id>}``, so a
session lives in one Redis Cluster slot)::

    <prefix>:{<sid>}:ctx      zset   member "key=value", score = µs time it was set
    <prefix>:{<sid>}:sum      list   summary lines, oldest first
    <prefix>:{<sid>}:recent   list   JSON {"role","content","tokens"}: the recent window
    <prefix>:{<sid>}:meta     hash   turns, full_tokens, created, updated
    <prefix>:sessions         zset   session id -> last update (seconds): the listing index

A load is one pipeline (one round trip). Recording a turn is one MULTI/EXEC
(one round trip) made only of commands that commute: pushes with trims,
increments, sets. Nothing is read and written back from Python, so concurrent
writers lose nothing. Every write refreshes the TTL of every key of the
session, so a session expires as a whole.

Context values live in the zset member itself (key names never hold '=', so
the first '=' splits it): setting a key adds ``key=value`` with a newer score and removes the members this process saw
for that key; a reader resolves any leftover duplicate by the highest score,
so even racing writers never lose a value.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from .config import Config
from .context import sanitize_key, sanitize_value
from .events import log
from .exceptions import MiddlewareError, StoreError, StoreUnavailableError
from .lru import Lru
from .state import SessionState, StoredMessage, TurnUpdate, whole_pairs
from .text import one_line, redact_url

__all__ = [
    "AsyncRedisStore",
    "RedisStore",
    "SessionKeys",
    "SessionPage",
    "SessionSummary",
    "decode_state",
    "load_commands",
    "record_commands",
]

Command = tuple[str, str, tuple[Any, ...]]  # (redis-py method, key, arguments after the key)

_MEMORY_SERVERS: dict[str, Any] = {}
# The store's own records (recent messages, traces) are plain dicts built here: orjson
# encodes and decodes them about ten times faster than the json module.
_dumps = orjson.dumps
_loads = orjson.loads
_MEMORY_LOCK = threading.Lock()


def _escape_tag(session_id: str) -> str:
    # The hash tag is the text between the first '{' and the next '}': braces in
    # an id must not end it early. '%' is escaped too so the mapping is one-to-one.
    return session_id.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


@dataclass(frozen=True, slots=True)
class SessionKeys:
    """The Redis key names of one session, built in this one place."""

    prefix: str
    session_id: str
    ctx: str = field(init=False)
    sum: str = field(init=False)
    recent: str = field(init=False)
    meta: str = field(init=False)
    traces: str = field(init=False)
    prompt: str = field(init=False)
    index: str = field(init=False)

    def __post_init__(self) -> None:
        base = f"{self.prefix}:{{{_escape_tag(self.session_id)}}}"
        for name in ("ctx", "sum", "recent", "meta", "traces", "prompt"):
            object.__setattr__(self, name, f"{base}:{name}")
        object.__setattr__(self, "index", index_key(self.prefix))

    @property
    def session_keys(self) -> tuple[str, ...]:
        """Every key of the session: written together, expiring together, reset together."""
        return (self.ctx, self.sum, self.recent, self.meta, self.traces, self.prompt)


@dataclass(frozen=True, slots=True)
class PairKeys:
    """The keys of one (user, agent) pair: its active session, its sessions and its notes."""

    prefix: str
    user_id: str
    agent: str

    @property
    def base(self) -> str:
        # '|' separates the two parts, so it is escaped inside them like the braces.
        tag = f"{_escape_tag(self.user_id).replace('|', '%7C')}|{_escape_tag(self.agent).replace('|', '%7C')}"
        return f"{self.prefix}:{{u:{tag}}}"

    @property
    def active(self) -> str:
        return f"{self.base}:active"

    @property
    def sessions(self) -> str:
        return f"{self.base}:sessions"

    @property
    def notes(self) -> str:
        return f"{self.base}:notes"


@functools.lru_cache(maxsize=65_536)
def _session_keys(prefix: str, session_id: str) -> SessionKeys:
    return SessionKeys(prefix, session_id)


# --- command building (pure) -------------------------------------------------


@functools.lru_cache(maxsize=65_536)
def index_key(prefix: str) -> str:
    """The listing index of every session: a sorted set scored by last update."""
    return f"{prefix}:sessions"


def load_commands(keys: SessionKeys) -> tuple[Command, ...]:
    """The reads of one load; the same for a session every time, so built once."""
    return (
        ("zrange", keys.ctx, (0, -1, False, True)),  # desc=False, withscores=True
        ("lrange", keys.sum, (0, -1)),
        ("lrange", keys.recent, (0, -1)),
        ("hgetall", keys.meta, ()),
    )


def _member(key: str, value: str) -> str:
    return f"{key}={value}"


@dataclass(frozen=True, slots=True)
class _Limits:
    ctx_members: int  # members kept in the ctx zset (keys plus room for racing duplicates)
    summary_lines: int  # lines kept in Redis: shown lines plus those of turns still in the window
    recent_messages: int
    ttl_ms: int
    trace_entries: int

    @classmethod
    def of(cls, config: Config) -> _Limits:
        cover = config.summary.cover_recent
        shown = config.summary.lines
        return cls(
            ctx_members=config.context.max_keys * 2 + 8,
            summary_lines=shown + (0 if cover or not shown else config.recent.turns),
            recent_messages=config.recent.messages,
            ttl_ms=config.store.ttl_seconds * 1000,
            trace_entries=config.traces.max_entries,
        )


def record_commands(
    keys: SessionKeys,
    update: TurnUpdate,
    config: Config,
    *,
    now: float,
    superseded: Iterable[str] = (),
    with_index: bool = True,
) -> list[Command]:
    """The commands of one recorded turn, all commutative, for one MULTI/EXEC."""
    limits: _Limits = config.derived("store_limits", _Limits.of)
    now_us = int(now * 1_000_000)
    commands: list[Command] = []
    scored: dict[str, int] = {}
    if update.context:
        for offset, (key, value) in enumerate(update.context):
            scored[_member(key, value)] = now_us + offset
        commands.append(("zadd", keys.ctx, (scored,)))
    written = set(scored)
    stale = [m for m in superseded if m not in written]
    if stale:
        commands.append(("zrem", keys.ctx, tuple(stale)))
    if update.context:
        commands.append(("zremrangebyrank", keys.ctx, (0, -(limits.ctx_members + 1))))
    if limits.summary_lines:
        commands.append(("rpush", keys.sum, (update.summary_line,)))
        commands.append(("ltrim", keys.sum, (-limits.summary_lines, -1)))
    if limits.recent_messages and update.recent:
        records = [_dumps({"role": m.role, "content": m.content, "tokens": m.tokens, "turn": update.turn_id}) for m in update.recent]
        commands.append(("rpush", keys.recent, tuple(records)))
        commands.append(("ltrim", keys.recent, (-limits.recent_messages, -1)))
    if update.traces and limits.trace_entries:
        # One record per turn (its events in order): one encode, one list element.
        record = {"ts": now, "turn_id": update.turn_id, "events": update.traces}
        commands.append(("rpush", keys.traces, (_dumps(record),)))
        commands.append(("ltrim", keys.traces, (-limits.trace_entries, -1)))
    if update.prompt:
        commands.append(("set", keys.prompt, (update.prompt,)))
    commands += [
        ("hincrby", keys.meta, ("turns", 1)),
        ("hincrby", keys.meta, ("full_tokens", update.full_tokens)),
        ("hsetnx", keys.meta, ("created", repr(now))),
        # hset(name, key, value, mapping): both fields in one command
        ("hset", keys.meta, (None, None, {"updated": repr(now), "last_turn": update.turn_id})),
    ]
    for key in keys.session_keys:
        commands.append(("pexpire", key, (limits.ttl_ms,)) if limits.ttl_ms else ("persist", key, ()))
    if with_index:
        commands += index_commands(keys, config, now=now)
    return commands


def index_commands(keys: SessionKeys, config: Config, *, now: float) -> list[Command]:
    """Keep the listing index: this session's last update; forget sessions past their TTL."""
    commands: list[Command] = [("zadd", keys.index, ({keys.session_id: now},))]
    if config.store.ttl_seconds:
        commands.append(("zremrangebyscore", keys.index, ("-inf", now - config.store.ttl_seconds)))
    return commands


_corrupt_sink: threading.local = threading.local()


def _warn_corrupt(session_id: str, key: str, reason: str) -> None:
    log.warning("store.corrupt_record", session=session_id, key=key, reason=reason)
    sink = getattr(_corrupt_sink, "items", None)
    if sink is not None:
        sink.append(f"{key}: {reason}")


def decode_with_warnings(session_id: str, replies: Sequence[Any], config: Config) -> tuple[SessionState, list[str]]:
    """decode_state, also returning the corrupt records it skipped (for the inspector)."""
    _corrupt_sink.items = []
    try:
        state, _ = decode_state(session_id, replies, config)
        return state, list(_corrupt_sink.items)
    finally:
        _corrupt_sink.items = None


def _decode_context(session_id: str, reply: Any, config: Config, seen: dict[str, set[str]]) -> dict[str, str]:
    best: dict[str, tuple[float, str]] = {}
    for raw, score in reply:
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        key, equals, value = text.partition("=")
        clean_key = sanitize_key(key)
        # Values were sanitized when written; a record written behind our back is re-sanitized.
        limit = config.context.max_value_chars
        clean_value = (value if value.isprintable() and len(value) <= limit and value == value.strip() and value
                       else sanitize_value(value, limit)) if equals else None  # fmt: skip
        if clean_key is None or clean_value is None:
            _warn_corrupt(session_id, "ctx", f"member {text[:80]!r} has an unusable key or value")
            continue
        seen.setdefault(clean_key, set()).add(text)
        if clean_key not in best or score >= best[clean_key][0]:
            best[clean_key] = (score, clean_value)
    if config.context.keys is not None and not best.keys() <= set(config.context.keys):
        best = {k: v for k, v in best.items() if k in config.context.keys}
    if len(best) > config.context.max_keys:
        best = dict(sorted(best.items(), key=lambda item: item[1][0])[-config.context.max_keys :])
    return {key: value for key, (_, value) in best.items()}


def _decode_recent(session_id: str, reply: Any) -> list[StoredMessage]:
    messages = []
    for raw in reply:
        try:
            record = _loads(raw)
            role, content = record["role"], record["content"]
            tokens = record.get("tokens", -1)
            if role not in {"user", "assistant"} or not isinstance(content, str):
                raise ValueError("bad role or content")
        except (ValueError, TypeError, KeyError, AttributeError):
            _warn_corrupt(session_id, "recent", f"entry {raw[:80]!r} is not a message record")
            continue
        valid_count = isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0
        messages.append(StoredMessage(role, content, tokens if valid_count else -1))
    return whole_pairs(messages)


def _meta_number(session_id: str, meta: dict[bytes, bytes], name: str, kind: type) -> Any:
    raw = meta.get(_META_FIELDS[name])
    if raw is None:
        return None
    try:
        return kind(raw.decode())
    except (ValueError, UnicodeDecodeError):
        _warn_corrupt(session_id, "meta", f"{name}={raw[:40]!r} is not a number")
        return None


_PARTS = ("ctx", "sum", "recent", "meta")  # what load_commands reads, in order
_LOAD_REPLIES = len(_PARTS)
_META_FIELDS = {name: name.encode() for name in ("turns", "full_tokens", "created", "updated")}


def decode_state(session_id: str, replies: Sequence[Any], config: Config) -> tuple[SessionState, dict[str, set[str]]]:
    """The state from the replies of ``load_commands``, and the context members seen per
    key; corrupt parts are skipped with a warning."""
    seen: dict[str, set[str]] = {}
    usable: dict[str, Any] = {}
    for part, reply in zip(_PARTS, replies, strict=True):
        if isinstance(reply, Exception):  # WRONGTYPE: something else was written at our key
            _warn_corrupt(session_id, part, f"unreadable: {reply}")
            reply = None
        usable[part] = reply
    context = _decode_context(session_id, usable["ctx"] or [], config, seen)
    recent = _decode_recent(session_id, usable["recent"] or [])
    lines = _decode_summary(usable["sum"] or [], config)
    if not config.summary.cover_recent:
        # The last lines belong to turns still shown in full in the recent window.
        lines = lines[: max(len(lines) - len(recent) // 2, 0)]
    meta = usable["meta"] or {}
    state = SessionState(
        session_id=session_id,
        context=context,
        summary=lines[-config.summary.lines :] if config.summary.lines else [],
        recent=[{"role": m.role, "content": m.content} for m in recent],
        recent_tokens=tuple(m.tokens for m in recent),
        pairs=tuple(recent) if all(m.tokens >= 0 for m in recent) else None,
        turns=_meta_number(session_id, meta, "turns", int) or 0,
        full_tokens=_meta_number(session_id, meta, "full_tokens", int) or 0,
        created_at=_meta_number(session_id, meta, "created", float),
        updated_at=_meta_number(session_id, meta, "updated", float),
        owner=_owner(meta),
    )
    return state, seen


def _owner(meta: Mapping[bytes, bytes]) -> tuple[str, str] | None:
    user, agent = meta.get(b"user"), meta.get(b"agent")
    if isinstance(user, bytes) and isinstance(agent, bytes):
        return user.decode("utf-8", "replace"), agent.decode("utf-8", "replace")
    return None


def _decode_summary(reply: Iterable[bytes], config: Config) -> list[str]:
    limit = config.summary.user_brief_chars + config.summary.action_brief_chars + 8
    lines = [one_line(raw.decode("utf-8", "replace"), limit) for raw in reply]
    return [line for line in lines if line]


class _SeenCache(Lru[dict[str, set[str]]]):
    """Per session, the context members this process last saw, so a write can remove
    the members it supersedes. Bounded; a miss only leaves duplicates that readers
    resolve by score."""

    def superseded(self, session_id: str, update: TurnUpdate) -> list[str]:
        """Members this write replaces; the cache then remembers the write's own members."""
        with self._lock:
            members = self._items.setdefault(session_id, {})
            stale = [m for key, _ in update.context for m in members.get(key, ())]
            for key, value in update.context:
                members[key] = {_member(key, value)}
            self._touch(session_id)
            return stale


# --- users, agents and notes ----------------------------------------------------


def new_session_id(user_id: str, agent: str) -> str:
    """A fresh session id for a (user, agent) pair: readable, searchable, unique."""
    return f"{user_id}/{agent}/{uuid.uuid4().hex[:12]}"


def resolve_commands(pair: PairKeys, candidate: str, now: float, ttl_ms: int) -> list[Command]:
    """Take the pair's active session, or make ``candidate`` active if there is none:
    HSETNX settles a race between two first calls, and HGET says who won."""
    commands: list[Command] = [
        ("hsetnx", pair.active, ("session_id", candidate)),
        ("hsetnx", pair.active, ("created", repr(now))),
        ("hset", pair.active, ("last_active", repr(now))),
        ("hget", pair.active, ("session_id",)),
    ]
    if ttl_ms:
        commands.append(("pexpire", pair.active, (ttl_ms,)))
    return commands


def activate_commands(pair: PairKeys, session_id: str, now: float, ttl_ms: int) -> list[Command]:
    """Make ``session_id`` the pair's active session and list it among the pair's sessions."""
    commands: list[Command] = [
        ("hset", pair.active, (None, None, {"session_id": session_id, "created": repr(now), "last_active": repr(now)})),
        ("zadd", pair.sessions, ({session_id: now},)),
    ]
    if ttl_ms:
        commands += [("pexpire", pair.active, (ttl_ms,)), ("pexpire", pair.sessions, (ttl_ms,))]
    return commands


def owner_commands(keys: SessionKeys, user_id: str, agent: str, ttl_ms: int) -> list[Command]:
    commands: list[Command] = [("hset", keys.meta, (None, None, {"user": user_id, "agent": agent}))]
    if ttl_ms:
        commands.append(("pexpire", keys.meta, (ttl_ms,)))
    return commands


# --- listing -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """One entry of a session listing: what the session holds."""

    session_id: str
    updated_at: float
    turns: int
    context_keys: int
    summary_lines: int
    recent_messages: int
    full_tokens: int
    user: str | None = None
    agent: str | None = None


@dataclass(frozen=True, slots=True)
class SessionPage:
    entries: list[SessionSummary]
    total: int
    page: int
    page_size: int

    @property
    def total_pages(self) -> int:
        return max(1, -(-self.total // self.page_size))


_GLOB_SPECIAL = str.maketrans({c: f"\\{c}" for c in "*?[]\\"})


def page_bounds(page: int, page_size: int) -> tuple[int, int]:
    """Page clamped to at least 1 and size to 1..200; returns (page, size)."""
    return max(1, int(page)), min(max(1, int(page_size)), 200)


def _summary(state: SessionState, score: float) -> SessionSummary:
    return SessionSummary(
        session_id=state.session_id,
        updated_at=state.updated_at or score,
        turns=state.turns,
        context_keys=len(state.context),
        summary_lines=len(state.summary),
        recent_messages=len(state.recent),
        full_tokens=state.full_tokens,
        user=state.owner[0] if state.owner else None,
        agent=state.owner[1] if state.owner else None,
    )


# --- clients -----------------------------------------------------------------


def _memory_server(url: str) -> Any:
    import fakeredis

    name = url.split("://", 1)[1] or "default"
    with _MEMORY_LOCK:
        if name not in _MEMORY_SERVERS:
            _MEMORY_SERVERS[name] = fakeredis.FakeServer()
        return _MEMORY_SERVERS[name]


def _client_options(config: Config, *, asyncio: bool) -> dict[str, Any]:
    """Timeouts, and one immediate retry on connection errors only.

    redis-py's default (10 retries with exponential backoff) would hold a caller for
    tens of seconds during an outage. One retry heals a pooled connection left stale
    by a server restart; a timeout is not retried, so a hung server costs one timeout.
    """
    import redis
    from redis.backoff import NoBackoff

    if asyncio:
        from redis.asyncio.retry import Retry
    else:
        from redis.retry import Retry  # type: ignore[assignment]
    timeout = config.store.timeout_seconds
    return {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry": Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
    }


def make_client(url: str, config: Config, *, asyncio: bool = False) -> Any:
    """A redis-py client for ``url``: ``memory://[name]`` is an in-process fakeredis
    server; with ``store.cluster`` the URL names any node of a Redis Cluster."""
    if url.startswith("memory://"):
        import fakeredis

        cls = fakeredis.FakeAsyncRedis if asyncio else fakeredis.FakeRedis
        return cls(server=_memory_server(url))
    options = _client_options(config, asyncio=asyncio)
    if config.store.cluster:
        if asyncio:
            from redis.asyncio.cluster import RedisCluster as AsyncCluster

            return AsyncCluster.from_url(url, **options)
        from redis.cluster import RedisCluster

        return RedisCluster.from_url(url, **options)
    if asyncio:
        import redis.asyncio as aioredis

        return aioredis.Redis.from_url(url, **options)
    import redis

    return redis.Redis.from_url(url, **options)


def _store_error(url: str, exc: BaseException) -> StoreError:
    import redis
    from redis.exceptions import ClusterDownError, MaxConnectionsError

    where = redact_url(url)
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError, OSError, ClusterDownError, MaxConnectionsError)):
        return StoreUnavailableError(f"Redis store {where} is unreachable: {type(exc).__name__}: {redact_url(str(exc))}")
    hint = ""
    if "MOVED" in str(exc) or type(exc).__name__ in {"MovedError", "AskError"}:
        hint = " (the server is a Redis Cluster node: set store.cluster: true)"
    return StoreError(f"Redis store {where} failed: {type(exc).__name__}: {redact_url(str(exc))}{hint}")


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _text_or_empty(value: Any) -> str:
    """A string reply as text; a missing key (None) or anything else as ""."""
    return _text(value) if isinstance(value, bytes) else ""


def _queue(pipe: Any, commands: Iterable[Command]) -> None:
    for method, key, args in commands:
        getattr(pipe, method)(key, *args)


def _has_turn_commands(keys: SessionKeys) -> list[Command]:
    return [("hget", keys.meta, ("last_turn",)), ("lrange", keys.recent, (0, -1))]


def _holds_turn(replies: Sequence[Any], turn_id: str) -> bool:
    if not turn_id:
        return False
    last, recent = replies
    if isinstance(last, bytes) and last.decode("utf-8", "replace") == turn_id:
        return True
    for record in recent if isinstance(recent, list) else ():
        try:
            if _loads(record).get("turn") == turn_id:
                return True
        except (ValueError, AttributeError):
            continue
    return False


def _failed_keys(commands: Sequence[Command], results: Sequence[Any]) -> set[str]:
    return {cmd[1] for cmd, result in zip(commands, results, strict=True) if isinstance(result, Exception)}


def _repair_commands(commands: Sequence[Command], bad: set[str]) -> list[Command]:
    """Commands to rewrite keys that held a foreign type: delete them, then replay
    only their own commands (every other command already applied once)."""
    return [("delete", key, ()) for key in sorted(bad)] + [cmd for cmd in commands if cmd[1] in bad]


def _turns_of(commands: Sequence[Command], results: Sequence[Any]) -> int:
    for cmd, result in zip(commands, results, strict=True):
        if cmd[0] == "hincrby" and cmd[2][0] == "turns" and isinstance(result, int):
            return result
    return 0


class _StoreBase:
    def __init__(self, client: Any, config: Config, *, url: str | None = None, owns_client: bool = False) -> None:
        self.client = client
        self.config = config
        self.url = url or config.store.url
        self._owns_client = owns_client
        self._seen = _SeenCache()
        self._owners: Lru[tuple[str, str]] = Lru()
        self._cluster = config.store.cluster

    def keys(self, session_id: str) -> SessionKeys:
        return _session_keys(self.config.store.key_prefix, session_id)

    def pair(self, user_id: str, agent: str) -> PairKeys:
        return PairKeys(self.config.store.key_prefix, user_id, agent)

    def _load_plan(self, session_id: str) -> tuple[list[Command], tuple[str, str] | None]:
        """The reads of a load; the notes join them when this process knows the session's owner."""
        owner = self._owners.get(session_id)
        commands = list(load_commands(self.keys(session_id)))
        if owner is not None and self.config.notes.max_tokens:
            commands.append(("get", self.pair(*owner).notes, ()))
        return commands, owner

    def _loaded(self, session_id: str, replies: Sequence[Any], owner: tuple[str, str] | None) -> tuple[SessionState, tuple[str, str] | None]:
        """The state, with notes if they were read; else the owner whose notes still need reading."""
        state = self._after_load(session_id, replies[:_LOAD_REPLIES])
        if state.owner is None:
            return state, None
        self._owners.put(session_id, state.owner)
        if owner == state.owner and len(replies) > _LOAD_REPLIES:
            return dataclasses.replace(state, notes=_text_or_empty(replies[_LOAD_REPLIES])), None
        return state, (state.owner if self.config.notes.max_tokens else None)

    def _record_plan(self, session_id: str, update: TurnUpdate, now: float) -> tuple[SessionKeys, list[Command]]:
        keys = self.keys(session_id)
        superseded = self._seen.superseded(session_id, update)
        commands = record_commands(keys, update, self.config, now=now, superseded=superseded, with_index=not self._cluster)
        return keys, commands

    def _after_load(self, session_id: str, replies: Sequence[Any]) -> SessionState:
        state, seen = decode_state(session_id, replies, self.config)
        self._seen.put(session_id, seen)
        return state

    def _page_entries(self, rows: Sequence[tuple[str, float]], replies: Sequence[Any]) -> tuple[list[SessionSummary], list[str]]:
        """Summaries of listed sessions, and ids the index holds but the store no longer does."""
        entries, stale = [], []
        for i, (sid, score) in enumerate(rows):
            state, _ = decode_state(sid, replies[_LOAD_REPLIES * i : _LOAD_REPLIES * (i + 1)], self.config)
            if state.is_empty:
                stale.append(sid)  # expired or deleted behind the index's back
                continue
            entries.append(_summary(state, score))
        return entries, stale

    def __repr__(self) -> str:
        return f"{type(self).__name__}(url={redact_url(self.url)!r})"


class RedisStore(_StoreBase):
    """Synchronous session store over redis-py (or fakeredis for ``memory://``)."""

    @classmethod
    def from_url(cls, url: str, config: Config) -> RedisStore:
        return cls(make_client(url, config), config, url=url, owns_client=True)

    def _run(self, commands: Sequence[Command], *, transaction: bool) -> list[Any]:
        try:
            pipe = self.client.pipeline(transaction=transaction)
            _queue(pipe, commands)
            return pipe.execute(raise_on_error=False)
        except StoreError:
            raise
        except Exception as exc:
            raise _store_error(self.url, exc) from exc

    def load(self, session_id: str) -> SessionState:
        """The session's state in one round trip (a second one, once per process, to find
        the notes of a session made by resolve_session)."""
        commands, owner = self._load_plan(session_id)
        state, missing = self._loaded(session_id, self._run(commands, transaction=False), owner)
        if missing is not None:
            state = dataclasses.replace(state, notes=self.get_notes(*missing))
        return state

    def resolve_session(self, user_id: str, agent: str, *, new: bool = False) -> str:
        """The pair's active session, created (or, with ``new``, replaced) as needed."""
        pair, now, ttl = self.pair(user_id, agent), time.time(), self.config.store.ttl_seconds * 1000
        candidate = new_session_id(user_id, agent)
        if not new:
            replies = self._run(resolve_commands(pair, candidate, now, ttl), transaction=True)
            winner = _text(replies[3])
            if winner != candidate:
                return winner
        self._run(activate_commands(pair, candidate, now, ttl), transaction=True)
        self._run(owner_commands(self.keys(candidate), user_id, agent, ttl), transaction=False)
        self._owners.put(candidate, (user_id, agent))
        return candidate

    def pair_sessions(self, user_id: str, agent: str) -> list[tuple[str, float]]:
        """The pair's sessions, newest first, with their creation times."""
        rows = self._run([("zrevrange", self.pair(user_id, agent).sessions, (0, -1, True))], transaction=False)[0]
        return [(_text(member), score) for member, score in rows or ()]

    def get_notes(self, user_id: str, agent: str) -> str:
        value = self._run([("get", self.pair(user_id, agent).notes, ())], transaction=False)[0]
        return _text_or_empty(value)

    def update_notes(self, user_id: str, agent: str, edit: Callable[[str], str]) -> str:
        """Apply ``edit`` to the notes atomically (WATCH/MULTI, retried if someone else wrote)."""
        key = self.pair(user_id, agent).notes
        try:
            def transaction(pipe: Any) -> str:
                current = pipe.get(key)
                updated = edit(_text_or_empty(current))
                pipe.multi()
                pipe.set(key, updated) if updated else pipe.delete(key)
                return updated

            return self.client.transaction(transaction, key, value_from_callable=True)  # type: ignore[no-any-return]
        except (StoreError, MiddlewareError):
            raise
        except Exception as exc:
            raise _store_error(self.url, exc) from exc

    def inspect(self, session_id: str, *, traces: int = 100) -> dict[str, Any]:
        """Everything stored for a session, read in one pipeline, for the inspector."""
        keys = self.keys(session_id)
        commands = [*load_commands(keys), ("lrange", keys.traces, (-max(traces, 1), -1)), ("get", keys.prompt, ())]
        replies = self._run(commands, transaction=False)
        state, warnings = decode_with_warnings(session_id, replies[:_LOAD_REPLIES], self.config)
        notes = self.get_notes(*state.owner) if state.owner else ""
        return {"state": dataclasses.replace(state, notes=notes), "traces": replies[_LOAD_REPLIES], "prompt": replies[_LOAD_REPLIES + 1], "warnings": warnings}

    def record(self, session_id: str, update: TurnUpdate, *, now: float | None = None) -> int:
        now = time.time() if now is None else now
        keys, commands = self._record_plan(session_id, update, now)
        results = self._run(commands, transaction=True)
        bad = _failed_keys(commands, results)
        if bad:
            log.warning("store.repaired", session=session_id, keys=sorted(bad))
            repair = _repair_commands(commands, bad)
            retried = self._run(repair, transaction=True)
            results = [*results, *retried]
            commands = [*commands, *repair]
        if self._cluster:
            self._run(index_commands(keys, self.config, now=now), transaction=False)
        return _turns_of(commands, results)

    def has_turn(self, session_id: str, update: TurnUpdate) -> bool:
        """Whether this turn's write already reached Redis (the replay check of degrade mode).

        Exact unless other writers recorded two or more turns in the same session since."""
        keys = self.keys(session_id)
        return _holds_turn(self._run(_has_turn_commands(keys), transaction=False), update.turn_id)

    def reset(self, session_id: str) -> None:
        keys = self.keys(session_id)
        self._run([("delete", key, ()) for key in keys.session_keys], transaction=not self._cluster)
        self._run([("zrem", keys.index, (session_id,))], transaction=False)
        self._seen.forget(session_id)
        self._owners.forget(session_id)

    def _index_page(self, search: str | None, page: int, page_size: int) -> tuple[list[tuple[str, float]], int]:
        index = index_key(self.config.store.key_prefix)
        try:
            if search:
                pattern = f"*{search.translate(_GLOB_SPECIAL)}*"
                found = sorted(
                    ((_text(m), s) for m, s in self.client.zscan_iter(index, match=pattern, count=500)),
                    key=lambda item: -item[1],
                )
                return found[(page - 1) * page_size : page * page_size], len(found)
            start = (page - 1) * page_size
            pipe = self.client.pipeline(transaction=False)
            pipe.zcard(index)
            pipe.zrevrange(index, start, start + page_size - 1, withscores=True)
            total, rows = pipe.execute()
            return [(_text(m), s) for m, s in rows], int(total)
        except Exception as exc:
            raise _store_error(self.url, exc) from exc

    def list_sessions(self, *, search: str | None = None, page: int = 1, page_size: int = 20) -> SessionPage:
        """Sessions newest first, optionally those whose id contains ``search``."""
        page, page_size = page_bounds(page, page_size)
        rows, total = self._index_page(search, page, page_size)
        commands = [cmd for sid, _ in rows for cmd in load_commands(self.keys(sid))]
        replies = self._run(commands, transaction=False) if commands else []
        entries, stale = self._page_entries(rows, replies)
        if stale:
            self._run([("zrem", self.keys(stale[0]).index, tuple(stale))], transaction=False)
        return SessionPage(entries=entries, total=total - len(stale), page=page, page_size=page_size)

    def ping(self) -> bool:
        try:
            return bool(self.client.ping())
        except Exception as exc:
            raise _store_error(self.url, exc) from exc

    def close(self) -> None:
        if self._owns_client:
            self.client.close()


def _is_async_client(client: Any) -> bool:
    from redis.asyncio import Redis as AsyncRedis
    from redis.asyncio.cluster import RedisCluster as AsyncCluster

    return isinstance(client, (AsyncRedis, AsyncCluster))  # fakeredis' async client is a Redis subclass


class AsyncRedisStore(_StoreBase):
    """The asyncio twin of :class:`RedisStore`, over ``redis.asyncio``.

    On a Redis Cluster it drives the synchronous cluster client in a worker thread:
    redis-py's asyncio cluster transactions run every queued command through a new
    thread and event loop (12x slower here, and broken before the client has been
    initialized), while the sync cluster client sends a transaction in one round trip.
    """

    def __init__(self, client: Any, config: Config, *, url: str | None = None, owns_client: bool = False) -> None:
        super().__init__(client, config, url=url, owns_client=owns_client)
        # A synchronous client (the cluster case) is driven through a worker thread.
        self._threaded = not _is_async_client(client)

    @classmethod
    def from_url(cls, url: str, config: Config) -> AsyncRedisStore:
        threaded = config.store.cluster and not url.startswith("memory://")
        return cls(make_client(url, config, asyncio=not threaded), config, url=url, owns_client=True)

    def _run_blocking(self, commands: Sequence[Command], transaction: bool) -> list[Any]:
        pipe = self.client.pipeline(transaction=transaction)
        _queue(pipe, commands)
        return pipe.execute(raise_on_error=False)  # type: ignore[no-any-return]

    async def _run(self, commands: Sequence[Command], *, transaction: bool) -> list[Any]:
        try:
            if self._threaded:
                return await asyncio.to_thread(self._run_blocking, commands, transaction)
            pipe = self.client.pipeline(transaction=transaction)
            _queue(pipe, commands)
            return await pipe.execute(raise_on_error=False)
        except StoreError:
            raise
        except Exception as exc:
            raise _store_error(self.url, exc) from exc

    async def _index_page(self, search: str | None, page: int, page_size: int) -> tuple[list[tuple[str, float]], int]:
        index = index_key(self.config.store.key_prefix)
        if self._threaded:
            return await asyncio.to_thread(RedisStore._index_page, self, search, page, page_size)  # type: ignore[arg-type]
        try:
            if search:
                pattern = f"*{search.translate(_GLOB_SPECIAL)}*"
                found = [(_text(m), s) async for m, s in self.client.zscan_iter(index, match=pattern, count=500)]
                found.sort(key=lambda item: -item[1])
                return found[(page - 1) * page_size : page * page_size], len(found)
            start = (page - 1) * page_size
            pipe = self.client.pipeline(transaction=False)
            pipe.zcard(index)
            pipe.zrevrange(index, start, start + page_size - 1, withscores=True)
            total, rows = await pipe.execute()
            return [(_text(m), s) for m, s in rows], int(total)
        except Exception as exc:
            raise _store_error(self.url, exc) from exc

    async def list_sessions(self, *, search: str | None = None, page: int = 1, page_size: int = 20) -> SessionPage:
        """Sessions newest first, optionally those whose id contains ``search``."""
        page, page_size = page_bounds(page, page_size)
        rows, total = await self._index_page(search, page, page_size)
        commands = [cmd for sid, _ in rows for cmd in load_commands(self.keys(sid))]
        replies = await self._run(commands, transaction=False) if commands else []
        entries, stale = self._page_entries(rows, replies)
        if stale:
            await self._run([("zrem", self.keys(stale[0]).index, tuple(stale))], transaction=False)
        return SessionPage(entries=entries, total=total - len(stale), page=page, page_size=page_size)

    async def load(self, session_id: str) -> SessionState:
        commands, owner = self._load_plan(session_id)
        state, missing = self._loaded(session_id, await self._run(commands, transaction=False), owner)
        if missing is not None:
            state = dataclasses.replace(state, notes=await self.get_notes(*missing))
        return state

    async def resolve_session(self, user_id: str, agent: str, *, new: bool = False) -> str:
        pair, now, ttl = self.pair(user_id, agent), time.time(), self.config.store.ttl_seconds * 1000
        candidate = new_session_id(user_id, agent)
        if not new:
            replies = await self._run(resolve_commands(pair, candidate, now, ttl), transaction=True)
            winner = _text(replies[3])
            if winner != candidate:
                return winner
        await self._run(activate_commands(pair, candidate, now, ttl), transaction=True)
        await self._run(owner_commands(self.keys(candidate), user_id, agent, ttl), transaction=False)
        self._owners.put(candidate, (user_id, agent))
        return candidate

    async def pair_sessions(self, user_id: str, agent: str) -> list[tuple[str, float]]:
        rows = (await self._run([("zrevrange", self.pair(user_id, agent).sessions, (0, -1, True))], transaction=False))[0]
        return [(_text(member), score) for member, score in rows or ()]

    async def get_notes(self, user_id: str, agent: str) -> str:
        value = (await self._run([("get", self.pair(user_id, agent).notes, ())], transaction=False))[0]
        return _text_or_empty(value)

    async def update_notes(self, user_id: str, agent: str, edit: Callable[[str], str]) -> str:
        key = self.pair(user_id, agent).notes
        try:
            if self._threaded:
                return await asyncio.to_thread(RedisStore.update_notes, self, user_id, agent, edit)  # type: ignore[arg-type]

            async def transaction(pipe: Any) -> str:
                current = await pipe.get(key)
                updated = edit(_text_or_empty(current))
                pipe.multi()
                pipe.set(key, updated) if updated else pipe.delete(key)
                return updated

            return await self.client.transaction(transaction, key, value_from_callable=True)  # type: ignore[no-any-return]
        except (StoreError, MiddlewareError):
            raise
        except Exception as exc:
            raise _store_error(self.url, exc) from exc

    async def inspect(self, session_id: str, *, traces: int = 100) -> dict[str, Any]:
        keys = self.keys(session_id)
        commands = [*load_commands(keys), ("lrange", keys.traces, (-max(traces, 1), -1)), ("get", keys.prompt, ())]
        replies = await self._run(commands, transaction=False)
        state, warnings = decode_with_warnings(session_id, replies[:_LOAD_REPLIES], self.config)
        notes = await self.get_notes(*state.owner) if state.owner else ""
        return {"state": dataclasses.replace(state, notes=notes), "traces": replies[_LOAD_REPLIES], "prompt": replies[_LOAD_REPLIES + 1], "warnings": warnings}

    async def record(self, session_id: str, update: TurnUpdate, *, now: float | None = None) -> int:
        now = time.time() if now is None else now
        keys, commands = self._record_plan(session_id, update, now)
        results = await self._run(commands, transaction=True)
        bad = _failed_keys(commands, results)
        if bad:
            log.warning("store.repaired", session=session_id, keys=sorted(bad))
            repair = _repair_commands(commands, bad)
            results = [*results, *await self._run(repair, transaction=True)]
            commands = [*commands, *repair]
        if self._cluster:
            await self._run(index_commands(keys, self.config, now=now), transaction=False)
        return _turns_of(commands, results)

    async def has_turn(self, session_id: str, update: TurnUpdate) -> bool:
        keys = self.keys(session_id)
        return _holds_turn(await self._run(_has_turn_commands(keys), transaction=False), update.turn_id)

    async def reset(self, session_id: str) -> None:
        keys = self.keys(session_id)
        await self._run([("delete", key, ()) for key in keys.session_keys], transaction=not self._cluster)
        await self._run([("zrem", keys.index, (session_id,))], transaction=False)
        self._seen.forget(session_id)
        self._owners.forget(session_id)

    async def ping(self) -> bool:
        try:
            if self._threaded:
                return bool(await asyncio.to_thread(self.client.ping))
            return bool(await self.client.ping())
        except Exception as exc:
            raise _store_error(self.url, exc) from exc

    async def close(self) -> None:
        if not self._owns_client:
            return
        if self._threaded:
            await asyncio.to_thread(self.client.close)
        else:
            await self.client.aclose()
