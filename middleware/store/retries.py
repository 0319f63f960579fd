"""A client's retries, for the OpenAI-compatible endpoint: one turn, however often it is sent.

A client that timed out, or lost its connection, sends a request again. Each request that
names a session has a key (its ``Idempotency-Key`` with its body, or its body alone: see
``middleware.serve.wire.retry_of``) and a nonce of its own, and takes a slot in a ring of
the session's last four such requests, in its ``live`` hash (``arrive.lua``)::

    requests         a counter: the requests with a key that arrived
    r:<slot>         "<key> <arrival number> <arrived> <nonce> <alive>": ``alive`` is when the
                     request last said it was still running (``beat``, every half second)
    o:<slot>         what it answered its client, once it has (``answer.lua``)

A request that may be a retry looks its key up first (``arrive.lua``). Found, it takes no
place of its own: it waits for that attempt's answer (``answer_of``) and gives the client
that, so the model is not paid twice, nor the turn recorded twice. It runs as a new turn
when the attempt went no further (``GAVE_UP``: its provider failed, its process died), and
when the attempt's answer reached its client (``DELIVERED``): then what is sent again is a
new message that happens to read the same (its first attempt never arrived), unless it
carries the same idempotency key, whose answer is kept whole (``middleware.serve.turns``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from ..core.effects import Batch, Command, Plan
from .decoding import checked
from .keys import Layout
from .scripts import Arguments, Script

__all__ = [
    "ALIVE_SECONDS",
    "ANSWER",
    "BEAT",
    "DELIVERED",
    "GAVE_UP",
    "Answer",
    "AnswerArguments",
    "BeatArguments",
    "Retry",
    "answer_command",
    "answer_of",
    "beat",
]

ANSWER = Script.named("answer")
BEAT = Script.named("beat")
ALIVE_SECONDS = 2.0  # a request silent this long (it says so every half second) is gone
GAVE_UP = b"-"  # the request went no further: its retry runs as a new turn
DELIVERED = b"+"  # its answer reached its client: what is sent again is a new message


class Retry(NamedTuple):
    """A request found to retry an earlier attempt: that attempt's slot in the ring, the key
    they share and the attempt's nonce."""

    slot: int
    key: str
    nonce: str


class Answer(NamedTuple):
    """What a request answered its client (JSON, see ``middleware.serve.turns``), or
    ``GAVE_UP`` or ``DELIVERED``, for a retry of it (``answer_command``)."""

    slot: int
    nonce: str
    text: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerArguments(Arguments):
    """ARGV of answer.lua: the request's slot in the ring, its nonce and its answer."""

    slot: int
    nonce: str
    answer: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class BeatArguments(Arguments):
    """ARGV of beat.lua: the clock and the request's nonce."""

    now_text: str
    nonce: str


def answer_command(layout: Layout, session_id: str, answer: Answer) -> Command:
    """Keep ``answer`` in the request's slot of the ring, unless a newer request took it."""
    arguments = AnswerArguments(slot=answer.slot, nonce=answer.nonce, answer=answer.text)
    return ANSWER.inline((layout.session(session_id).live,), arguments)


def beat(layout: Layout, session_id: str, nonce: str, *, now: float) -> Plan[bool]:
    """Say that the request ``nonce`` still runs (until its answer is kept); False when it
    holds no slot (it has not arrived yet, or a newer request took its slot)."""
    command = BEAT.inline((layout.session(session_id).live,), BeatArguments(now_text=repr(now), nonce=nonce))
    (found,) = checked((yield Batch([command])))
    return bool(found)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def answer_of(layout: Layout, session_id: str, retry: Retry, *, now: float) -> Plan[bytes | None]:
    """What the attempt ``retry`` retries answered its client: its JSON, ``DELIVERED``, or
    ``GAVE_UP`` when it went no further (its turn given up, its slot taken since by a newer
    request, or its request silent for ``ALIVE_SECONDS``: its process is gone); None while it
    runs."""
    live = layout.session(session_id).live
    ((entry, answer),) = checked((yield Batch([("hmget", live, f"r:{retry.slot}", f"o:{retry.slot}")])))
    fields = _text(entry).split(" ") if entry is not None else []
    if len(fields) != 5 or fields[0] != retry.key or fields[3] != retry.nonce:
        return GAVE_UP
    if answer is not None:
        return answer if isinstance(answer, bytes) else str(answer).encode()
    try:
        alive = float(fields[4])
    except ValueError:
        return GAVE_UP
    return GAVE_UP if now - alive > ALIVE_SECONDS else None
