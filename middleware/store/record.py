"""Recording a turn: one server-side script (``record.lua``), atomic, idempotent by turn id,
and with the bounds that need to look at what is stored (the newest values per context
key, the keys set most recently, the archive's oldest turn) applied where the data is, so
no writer reads and writes back. Every write refreshes the TTL of the whole session.

Context members are "key=value" scored turn * 1000 + position: the newest value of a key
is its current one, and the score tells the turn that set each value. The archive holds
pieces "<turn>.<n>" -> "kind<TAB>tokens:share<TAB>facts<TAB>text" (share: the hundredths
of its terms that were rare in the archive when it was written; facts: the terms of what it
says, rather than of the names it says them with; a user sentence with neighbours worth
recalling beside it ends "text<TAB>before<TAB>after", see ``decoding.archived``); the index maps each term to the ids of
the pieces holding it, newest last, at most POSTINGS bytes of them. With semantic recall
each piece with a vector also gets a hash of its own, which the server's vector index
covers (see ``vectors``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, NamedTuple

import orjson

from ..core.effects import Batch, Command, Plan
from ..core.state import TurnUpdate
from ..exceptions import StoreError, StoreUnavailableError
from .decoding import checked, error_text, text_of
from .keys import POSTINGS, Layout, recorded_keys
from .scripts import Arguments, Script, no_script
from .vectors import vector_prefix, vector_tag

__all__ = ["RECORD", "RecordArguments", "Recorded", "index_commands", "record", "record_arguments", "record_command"]

RECORD = Script.named("record")
_dumps = orjson.dumps  # the store's own records: about ten times faster than the json module


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordArguments(Arguments):
    """ARGV of record.lua: the named arguments, then the tail (each group counted): the
    context keys set, the recent window's records, the archived pieces (with their vectors),
    and the tools called (with the window they are remembered for)."""

    TAIL = ("context", "recent", "pieces", "tool_window", "tools")

    turn_id: str
    now: str
    ttl_ms: int
    full_tokens: int
    max_keys: int
    key_history: int
    summary_lines: int
    recent_messages: int
    trace_entries: int
    turn_ids: int
    session_id: str
    index_cutoff: str
    summary_line: str
    trace: bytes | str
    prompt_json: str
    archive_turns: int
    postings: int
    vector_prefix: str
    vector_tag: str
    composed: int  # 1: the session composes from now on (TurnUpdate.composed)
    context: tuple[tuple[str, str], ...]
    recent: tuple[bytes, ...]
    pieces: tuple[tuple[str, int, str, str, str, bytes], ...]  # kind tokens terms facts text vector
    tool_window: int
    tools: tuple[str, ...]

    def argv(self) -> list[Any]:
        argv = self.head()
        argv.append(len(self.context))
        argv.extend(chain.from_iterable(self.context))
        argv.append(len(self.recent))
        argv.extend(self.recent)
        argv.append(len(self.pieces))
        argv.extend(chain.from_iterable(self.pieces))
        argv += (self.tool_window, len(self.tools), *self.tools)
        return argv


def _with_around(text: str, around: tuple[str, str]) -> str:
    """A piece's text as archived: with its neighbours after tabs, where it has any (a
    piece's text and its neighbours are one line each, so hold no tab)."""
    return f"{text}\t{around[0]}\t{around[1]}" if around[0] or around[1] else text


def record_arguments(layout: Layout, session_id: str, update: TurnUpdate, *, now: float,
                     vectors: Sequence[bytes] = ()) -> RecordArguments:  # fmt: skip
    """What record.lua is given for ``update``; ``vectors``: one encoded vector per piece, for semantic recall."""
    recent = tuple(_dumps({"role": m.role, "content": m.content, "tokens": m.tokens, "turn": update.turn_id})
                   for m in update.recent)  # fmt: skip
    # One record per turn (its events in order): one encode, one list element.
    trace = _dumps({"ts": now, "turn_id": update.turn_id, "events": update.traces}) if update.traces else ""
    pieces = update.pieces if layout.archive_turns else ()
    blobs = list(vectors) if len(vectors) == len(pieces) else [b""] * len(pieces)
    # With semantic recall the prefix goes with every write, vectors or not, so the vectors of
    # turns that leave the archive go with them (a cluster has no vector index).
    semantic = any(blobs) or layout.semantic
    return RecordArguments(
        turn_id=update.turn_id, now=repr(now), ttl_ms=layout.ttl_ms, full_tokens=update.full_tokens, max_keys=layout.max_keys,
        key_history=layout.key_history, summary_lines=layout.summary_lines,
        recent_messages=layout.recent_messages if update.recent else 0, trace_entries=layout.trace_entries,
        turn_ids=layout.turn_ids, session_id=session_id,
        index_cutoff=repr(now - layout.ttl_ms / 1000) if layout.ttl_ms and not layout.cluster else "",
        summary_line=update.summary_line, trace=trace, prompt_json=update.prompt, archive_turns=layout.archive_turns,
        postings=POSTINGS, vector_prefix=vector_prefix(layout, session_id) if semantic else "",
        vector_tag=vector_tag(session_id) if semantic else "", composed=int(update.composed), context=tuple(update.context),
        recent=recent,
        pieces=tuple((p.kind, p.tokens, " ".join(p.terms), " ".join(p.facts), _with_around(p.text, p.around), blob)
                     for p, blob in zip(pieces, blobs, strict=True)),
        tool_window=layout.tool_window, tools=tuple(update.tools) if layout.tool_window else (),
    )  # fmt: skip


def record_keys(layout: Layout, session_id: str) -> tuple[str, ...]:
    """The keys record.lua is given: the session's recorded keys, then the listing index unless on a cluster."""
    return (*recorded_keys(layout.session(session_id)), *(() if layout.cluster else (layout.index,)))


def record_command(layout: Layout, session_id: str, update: TurnUpdate, *, now: float, vectors: Sequence[bytes] = ()) -> Command:
    """The one command that records a turn: the script by its SHA (see ``record``)."""
    arguments = record_arguments(layout, session_id, update, now=now, vectors=vectors)
    return RECORD.by_sha(record_keys(layout, session_id), arguments)


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


def record(layout: Layout, session_id: str, update: TurnUpdate, *, now: float, vectors: Sequence[bytes] = ()) -> Plan[Recorded]:
    """Write one turn: one script, run by its SHA (a server that has not seen it yet gets
    it once). Idempotent by ``update.turn_id``: a retry whose first attempt did land (its
    reply lost) writes nothing and says so. On a cluster the listing index, in another
    slot, follows in a round trip of its own that never fails the turn."""
    command = record_command(layout, session_id, update, now=now, vectors=vectors)
    try:
        (reply,) = yield Batch([command])
        if no_script(reply):
            (reply,) = yield Batch([RECORD.by_text(command)])
    except StoreUnavailableError as exc:
        if type(exc.__cause__).__name__ != "TimeoutError":  # no connection: the write did not go out (a lost reply was retried)
            raise
        raise StoreUnavailableError(
            f"{exc}. The turn may have been recorded: the write was sent and its reply did not come in time. "
            "Read the session's turn count (get_state) before recording it again; with store.on_store_error: "
            "degrade the turn is held instead, and written once."
        ) from exc
    turns, written, *repaired = checked([reply])[0]
    recorded = Recorded(int(turns), bool(written), tuple(map(text_of, repaired)))
    if layout.cluster and written:
        try:
            replies = yield Batch(index_commands(layout, session_id, now=now))
            failed: BaseException | None = next((r for r in replies if isinstance(r, Exception)), None)
        except StoreError as exc:
            failed = exc
        if failed is not None:
            recorded = recorded._replace(index_error=error_text(failed))
    return recorded
