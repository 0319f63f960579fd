"""Turns that span requests, for the OpenAI-compatible endpoint: their order in the session.

Processes share nothing but Redis, so what a turn needs across requests lives in the
session's ``live`` hash, under the session's hash tag (one cluster slot)::

    arrived          a counter: a turn's arrival number is its place in the session
    applied          the last arrival number whose turn was recorded (or given up on)
    queued, blocked  finished turns waiting for an earlier one, and since when (seconds)
    l:<n>            the lease of turn n, in flight: when its request last renewed it
    q:<n>            the record arguments of finished turn n, waiting for their turn
    open:<call id>   a turn waiting for the client's tool results, by its first pending call id
    imported         set once: a new session took the history its first request carried
                     ('0' while the request that was to take it failed first)
    requests         a counter: the requests with a key (see below) that arrived
    r:<slot>, o:<slot>   a ring of the last four such requests and their answers
                     (``middleware.store.retries``)
    epoch            set once, by the request that made the hash: its incarnation (a reset
                     deletes the hash, and the next request makes a new one)

A finished turn is recorded by a server-side script (``finish.lua``, with ``order.lua``)
that applies queued turns strictly in arrival order, so concurrent requests to one session
from any number of processes are recorded once each, in the order they arrived. A turn that
waits for the client's tool results gives its place up (the client decides how long that
takes) and is recorded when it ends. A turn in flight holds the line while its request
renews its lease, for ``serve.order_wait_seconds`` at most; one whose request is gone (its
process died, its arrival reply was lost) for ``LEASE_SECONDS``; either is recorded
whenever it does finish. A turn queued behind one holding the line is applied by the next
script to flush the session: its own process flushes again (``catch_up``) until it is, so
it does not wait for the session's next request (unless that process stops, or the store
fails, first). A turn whose session was reset while it ran is not recorded, nor renewed,
nor continued by tool results: each request carries the epoch it arrived in.

A client that timed out, or lost its connection, sends the request again: a retry, which
waits for the first attempt's answer instead of taking a place of its own
(``middleware.store.retries``).
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from ..core.conversation import OpenTurn
from ..core.effects import Batch, Command, Plan
from .decoding import checked
from .keys import Layout, recorded_keys
from .record import RecordArguments, index_commands
from .retries import Answer, Retry, answer_command
from .scripts import Arguments, Script, no_script

__all__ = [
    "ARRIVE",
    "FINISH",
    "FLUSH",
    "LEASE_SECONDS",
    "RENEW",
    "Arrival",
    "ArriveArguments",
    "FinishArguments",
    "FlushArguments",
    "RenewArguments",
    "arrival",
    "arrive_command",
    "catch_up",
    "finish",
    "release_import",
    "renew",
    "wait_for_results",
]

ARRIVE = Script.named("arrive")
FINISH = Script.named("finish")
FLUSH = Script.named("flush")
RENEW = Script.named("renew")
# How long a turn in flight holds its session's line without renewing its lease, in seconds:
# a request renews it every LEASE_SECONDS / 4 while it runs, so only a request whose process
# died (or whose arrival reply was lost) lets it lapse, and later turns wait that long at most.
LEASE_SECONDS = 2.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ArriveArguments(Arguments):
    """ARGV of arrive.lua: the clock, how long a turn may hold the line, the session's TTL,
    how long a lease lasts unrenewed, whether a new turn takes an arrival number, whether the
    request may import history, the epoch a hash it makes takes, the request's key ("": none),
    whether it is a retry (look the key up first) and its nonce; then the ``open:<call id>``
    fields its tool results may answer."""

    TAIL = ("fields",)

    now_text: str
    wait_text: str
    ttl_text: int
    lease_text: str
    reserve: int
    mark_import: int
    epoch: str
    key: str
    retry: int
    nonce: str
    fields: tuple[str, ...]

    def argv(self) -> list[Any]:
        return [*self.head(), *self.fields]


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishArguments(Arguments):
    """ARGV of finish.lua: the clock, the wait, the TTL and the lease (as for arriving), the
    turn's arrival number, its record arguments as JSON ([] gives the place up), the
    ``live`` field it waited in (forgotten now), if any, and the epoch it arrived in."""

    now_text: str
    wait_text: str
    ttl_text: int
    lease_text: str
    seq: int
    entry: bytes
    drop: str
    epoch: str


def _keys(layout: Layout, session_id: str) -> tuple[str, ...]:
    """Every key the ordering scripts touch: the live hash, the recorded keys, the listing index unless on a cluster."""
    keys = layout.session(session_id)
    return (keys.live, *recorded_keys(keys), *(() if layout.cluster else (layout.index,)))


def _entry(arguments: RecordArguments | None) -> bytes:
    """A finished turn's record arguments as the ordering scripts keep them (JSON strings)."""
    values = arguments.argv() if arguments is not None else []
    return orjson.dumps([value.decode() if isinstance(value, bytes) else str(value) for value in values])


class Arrival(NamedTuple):
    seq: int  # the arrival number given to a new turn (0 when none was asked for or one was open)
    open: OpenTurn | None  # the turn the request's tool results answer, when one is waiting
    first: bool  # the first request to arrive in this session, which may import the history it carries
    epoch: str  # the incarnation of the session's live hash it arrived in (see the module docstring)
    slot: int = -1  # its slot in the ring of requests (-1: it has no key)
    retried: Retry | None = None  # the earlier attempt it retries (then it took nothing else)


def arrive_command(
    layout: Layout, session_id: str, *, waiting: Sequence[str], reserve: bool, mark_import: bool, now: float, wait: float,
    key: str = "", retry: bool = False, nonce: str = "",
) -> Command:  # fmt: skip
    """The command by which a request arrives: find the earlier attempt it retries (``retry``,
    by ``key``, a hex digest), else apply the turns due, find the open turn its tool results
    answer (``waiting``: their call ids), or give a new turn its arrival number, and take a
    slot in the ring for ``key``, under the request's ``nonce`` (hex; see
    ``middleware.store.retries``). Sent ahead of the session's load, in the same round trip
    (see ``load.load``)."""
    arguments = ArriveArguments(now_text=repr(now), wait_text=repr(wait), ttl_text=layout.ttl_ms, lease_text=repr(LEASE_SECONDS),
                                reserve=int(reserve), mark_import=int(mark_import), epoch=secrets.token_hex(8), key=key,
                                retry=int(retry and bool(key)), nonce=nonce if key else "",
                                fields=tuple(f"open:{call}" for call in waiting))  # fmt: skip
    return ARRIVE.inline(_keys(layout, session_id), arguments)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def arrival(reply: Any, key: str = "") -> Arrival:
    """What the arrival command's reply says (``key``: the request's); StoreError for an error reply."""
    seq, found, first, epoch, slot, retried = checked([reply])[0]
    retry = None
    if retried:
        at, nonce = _text(retried).split()
        retry = Retry(int(at), key, nonce)
    return Arrival(int(seq), OpenTurn.from_json(found) if found else None, bool(first), _text(epoch), int(slot), retry)


def _answered(layout: Layout, session_id: str, answer: Answer | None) -> list[Command]:
    return [answer_command(layout, session_id, answer)] if answer is not None and answer.slot >= 0 else []


def release_import(layout: Layout, session_id: str) -> Plan[None]:
    """The request that was to import the history its session's first request carried
    failed before it did: the next request that carries one imports it (``arrive.lua``)."""
    checked((yield Batch([("hset", layout.session(session_id).live, "imported", "0")])))


def wait_for_results(
    layout: Layout, session_id: str, turn: OpenTurn, *, drop: str | None, now: float, wait: float, epoch: str,
    answer: Answer | None = None,
) -> Plan[OpenTurn]:  # fmt: skip
    """Keep ``turn`` for the request that brings its tool results (and forget where it was).
    Its place in the session is given up: how long a client takes to run tools is up to
    the client, and later turns should not wait on it. It is recorded when it ends."""
    live, waiting = layout.session(session_id).live, dataclasses.replace(turn, seq=0)
    commands: list[Command] = [*_answered(layout, session_id, answer), ("hset", live, waiting.field, waiting.to_json())]
    if drop and drop != waiting.field:
        commands.append(("hdel", live, drop))
    if layout.ttl_ms:
        commands.append(("pexpire", live, layout.ttl_ms))
    if turn.seq:
        gone = FinishArguments(now_text=repr(now), wait_text=repr(wait), ttl_text=layout.ttl_ms, lease_text=repr(LEASE_SECONDS),
                               seq=turn.seq, entry=b"[]", drop="", epoch=epoch)  # fmt: skip
        commands.append(FINISH.inline(_keys(layout, session_id), gone))
    checked((yield Batch(commands, transaction=True)))
    return waiting


@dataclass(frozen=True, slots=True, kw_only=True)
class RenewArguments(Arguments):
    """ARGV of renew.lua: the clock, the turn's arrival number and the epoch it arrived in."""

    now_text: str
    seq: int
    epoch: str


def renew(layout: Layout, session_id: str, seq: int, *, now: float, epoch: str) -> Plan[bool]:
    """Renew the lease of turn ``seq``, still in flight; False when it is gone (the turn was
    recorded, or passed over after its lease lapsed, or its session was reset)."""
    command = RENEW.inline((layout.session(session_id).live,), RenewArguments(now_text=repr(now), seq=seq, epoch=epoch))
    (renewed,) = checked((yield Batch([command])))
    return bool(renewed)


def finish(
    layout: Layout, session_id: str, seq: int, record: RecordArguments | None, *, drop: str | None, now: float, wait: float,
    epoch: str, answer: Answer | None = None,
) -> Plan[bool]:  # fmt: skip
    """Record a finished turn in its place (``record``: what record.lua is given for it;
    None gives the place up), with what its request answered (``answer``, kept first); False
    when it was queued behind an earlier turn still holding the line (see ``catch_up``). On
    a cluster the listing index, in another slot, is written beside the script (best effort,
    as ``record.record`` does)."""
    arguments = FinishArguments(now_text=repr(now), wait_text=repr(wait), ttl_text=layout.ttl_ms, lease_text=repr(LEASE_SECONDS),
                                seq=seq, entry=_entry(record), drop=drop or "", epoch=epoch)  # fmt: skip
    outside = index_commands(layout, session_id, now=now) if layout.cluster and record is not None else []
    kept = _answered(layout, session_id, answer)
    replies = yield Batch([*kept, FINISH.inline(_keys(layout, session_id), arguments), *outside])
    applied = checked(replies[: len(kept) + 1])[-1]  # the answer kept, then the turn's end
    return bool(applied)


@dataclass(frozen=True, slots=True, kw_only=True)
class FlushArguments(Arguments):
    """ARGV of flush.lua: the clock, the wait, the TTL and the lease (as for arriving), and
    the arrival number of the queued turn and the epoch it arrived in."""

    now_text: str
    wait_text: str
    ttl_text: int
    lease_text: str
    seq: int
    epoch: str


def catch_up(
    layout: Layout, session_id: str, seq: int, *, now: float, wait: float, epoch: str
) -> Plan[tuple[bool, int]]:  # fmt: skip
    """Apply the session's turns due, for turn ``seq``, which ``finish`` queued: whether it
    is applied (or the session is gone), and the last place applied. A turn ahead that holds
    the line is passed over when its lease lapses or the wait ends, so its process calls
    this until then, and on while the line moves."""
    arguments = FlushArguments(now_text=repr(now), wait_text=repr(wait), ttl_text=layout.ttl_ms, lease_text=repr(LEASE_SECONDS),
                               seq=seq, epoch=epoch)  # fmt: skip
    command = FLUSH.by_sha(_keys(layout, session_id), arguments)  # sent again and again: not its text each time
    (reply,) = yield Batch([command])
    if no_script(reply):
        (reply,) = yield Batch([FLUSH.by_text(command)])
    ((done, applied),) = checked([reply])
    return bool(done), int(applied)
