"""Sessions as a whole: a (user, agent) pair's active session and its list, reset, the
listing index, inspection, and what the server says about itself."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ..core.effects import Batch, Command, Plan
from ..core.state import SessionPage, SessionState, SessionSummary
from ..core.text import quoted
from ..exceptions import InvalidInputError
from .decoding import LOAD_REPLIES, Corrupt, checked, decode_state, refused, text_of, wrong_type
from .keys import Layout
from .load import load_commands
from .notes import read_notes
from .vectors import vector_prefix

__all__ = [
    "MAX_PAGE",
    "Inspection",
    "eviction_policy",
    "inspect",
    "list_sessions",
    "page_bounds",
    "pair_sessions",
    "ping",
    "reset",
    "resolve_session",
]


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
        replies = checked((yield Batch([*commands, *([("pexpire", pair.active, ttl)] if ttl else [])], transaction=True)))
        winner = text_of(replies[3])
        if winner != candidate:
            return winner
    activate: list[Command] = [
        ("hset", pair.active, None, None, {"session_id": candidate, "created": repr(now), "last_active": repr(now)}),
        ("zadd", pair.sessions, {candidate: now}),
    ]
    if ttl:
        activate += [("pexpire", pair.active, ttl), ("pexpire", pair.sessions, ttl)]
    checked((yield Batch(activate, transaction=True)))
    meta = layout.session(candidate).meta
    owner: list[Command] = [
        ("hset", meta, None, None, {"user": user_id, "agent": agent}),
        *([("pexpire", meta, ttl)] if ttl else []),
    ]
    checked((yield Batch(owner)))
    return candidate


def pair_sessions(layout: Layout, user_id: str, agent: str) -> Plan[list[tuple[str, float]]]:
    """The pair's sessions, newest first, with their creation times."""
    (rows,) = checked((yield Batch([("zrevrange", layout.pair(user_id, agent).sessions, 0, -1, True)])))
    return [(text_of(member), score) for member, score in rows or ()]


def reset(layout: Layout, session_id: str) -> Plan[None]:
    """Delete every key of the session and its index entry, and with semantic recall the
    vectors of its archived pieces (they would outlive the session by half a TTL, and be
    found by meaning again: a reset forgets)."""
    keys = layout.session(session_id)
    vectors: list[Command] = []
    if layout.semantic:
        (ids,) = yield Batch([("hkeys", keys.arc)])
        prefix = vector_prefix(layout, session_id)
        names = [prefix + text_of(piece) for piece in ids] if isinstance(ids, list) else []
        vectors = [("delete", *names[at : at + 500]) for at in range(0, len(names), 500)]
    yield Batch([*vectors, *(("delete", key) for key in keys)], transaction=not layout.cluster)
    yield Batch([("zrem", layout.index, session_id)])


_GLOB_SPECIAL = str.maketrans({c: f"\\{c}" for c in "*?[]\\"})


# Beyond this a page's offset no longer fits a Redis range: refused, not sent to fail there.
MAX_PAGE = 1_000_000_000


def _whole(name: str, value: Any) -> int:
    """``value`` if it is an int (a bool, a float or a numeric string is not: refused, naming it)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{name} is {quoted(value, 40)} (a {type(value).__name__[:40]}); expected an integer.")
    return value


def page_bounds(page: int, page_size: int) -> tuple[int, int]:
    """Page clamped to at least 1 and size to 1..200; returns (page, size). Values that are
    not integers are refused (a float or a string was read as one)."""
    page, page_size = _whole("page", page), _whole("page_size", page_size)
    if page > MAX_PAGE:
        raise InvalidInputError(f"Page {quoted(page, 40)} is out of range; expected a page number up to {MAX_PAGE:,}.")
    return max(1, page), min(max(1, page_size), 200)


def _index_page(layout: Layout, search: str | None, page: int, page_size: int) -> Plan[tuple[list[tuple[str, float]], int]]:
    start = (page - 1) * page_size
    if not search:
        total, rows = checked(
            (yield Batch([("zcard", layout.index), ("zrevrange", layout.index, start, start + page_size - 1, True)]))
        )
        return [(text_of(m), s) for m, s in rows], int(total)
    pattern, cursor, found = f"*{search.translate(_GLOB_SPECIAL)}*", 0, []
    while True:
        ((cursor, rows),) = checked((yield Batch([("zscan", layout.index, cursor, pattern, 500)])))
        found += [(text_of(m), s) for m, s in rows]
        if not int(cursor):
            break
    found.sort(key=lambda item: -item[1])
    return found[start : start + page_size], len(found)


def list_sessions(layout: Layout, *, search: str | None = None, page: int = 1, page_size: int = 20) -> Plan[SessionPage]:
    """Sessions newest first, optionally those whose id contains ``search``; ids the index
    holds but the store no longer does (expired, deleted) are dropped from it."""
    if search is not None and not isinstance(search, str):
        raise InvalidInputError(
            f"search is of type {type(search).__name__[:40]}; expected a string (part of a session id) or None."
        )
    page, page_size = page_bounds(page, page_size)
    rows, total = yield from _index_page(layout, search, page, page_size)
    commands = [cmd for sid, _ in rows for cmd in load_commands(layout.session(sid))]
    replies = (yield Batch(commands)) if commands else []
    entries, stale = [], []
    for i, (sid, score) in enumerate(rows):
        state = decode_state(sid, replies[LOAD_REPLIES * i : LOAD_REPLIES * (i + 1)], layout).state
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
    # No writer keeps more than 100,000 (traces.max_entries); a huge count fails in Redis.
    count = min(max(_whole("traces", traces), 1), 100_000)
    replies = yield Batch([*load_commands(keys), ("lrange", keys.traces, -count, -1), ("get", keys.prompt)])
    loaded = decode_state(session_id, replies[:LOAD_REPLIES], layout)
    state, corrupt = loaded.state, loaded.corrupt
    for reply in replies[LOAD_REPLIES:]:  # a foreign trace or prompt key is the view's to warn about
        if isinstance(reply, Exception) and not wrong_type(reply):
            raise refused(reply)
    if state.owner:
        state = dataclasses.replace(state, notes=(yield from read_notes(layout, *state.owner)))
    return Inspection(state, replies[LOAD_REPLIES], replies[LOAD_REPLIES + 1], corrupt)


def read_traces(layout: Layout, session_id: str) -> Plan[list[dict[str, Any]]]:
    """The session's turn records, oldest first (see ``decode_traces``)."""
    keys = layout.session(session_id)
    (reply,) = yield Batch([("lrange", keys.traces, 0, -1)])
    if isinstance(reply, Exception):
        if wrong_type(reply):  # corrupt: nothing to resend (record.lua replaces it)
            return []
        raise refused(reply)
    return decode_traces(reply)


def decode_traces(records: Sequence[bytes]) -> list[dict[str, Any]]:
    """Turn records as read, decoded, oldest first; [] where one is not a JSON object (a
    history with a hole is not resent)."""
    out = []
    for raw in records:
        try:
            trace = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return []
        if not isinstance(trace, dict):
            return []
        out.append(trace)
    return out


def eviction_policy(layout: Layout) -> Plan[str | None]:
    """The server's maxmemory-policy, or None where it will not say (CONFIG disabled or not
    permitted, or a cluster, whose nodes may differ). An unreachable server is an error."""
    if layout.cluster:
        return None
    (reply,) = yield Batch([("config_get", "maxmemory-policy")])
    value = reply.get("maxmemory-policy") if isinstance(reply, dict) else None
    return text_of(value) if value is not None else None


def ping(layout: Layout) -> Plan[bool]:
    """True when the store answers (a read of the listing index: a keyed command, so a
    cluster routes it, where a pipelined PING is refused); StoreError when it does not."""
    checked((yield Batch([("exists", layout.index)])))
    return True
