"""What programs ask their runner to do. No I/O here: a program yields effects and
receives their results, the way h11's ``Connection`` returns bytes and leaves the
socket to its caller.

- ``Batch``: Redis commands sent in one round trip; the result is the list of replies.
- ``Io``: a call with a sync and an async form (an LLM request, a tool, a chatbot).
- ``Next``: the next item of an iterator an ``Io`` returned (a streamed reply), or ``END``.
- ``Emit``: text for the caller of a stream; the result is None.

A program is a generator of effects. The runners in ``middleware.runner`` perform them
in the calling thread (sync) or awaited (async); an effect that fails is thrown back
into the program, so the program's own ``try``/``except`` decides what a failure means.
A store *plan* is a program that yields only batches.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["END", "Abandoned", "Batch", "Command", "Effect", "Emit", "Inline", "Io", "Next", "Plan", "Program"]

T = TypeVar("T")

# (redis-py method name, *arguments); for commands on a key, the key comes first.
Command = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Batch:
    """Commands sent in one round trip: a pipeline, or one MULTI/EXEC with ``transaction``.
    Its result lists one reply per command; an error reply stands in its command's place."""

    commands: Sequence[Command]
    transaction: bool = False


@dataclass(frozen=True, slots=True)
class Io:
    """A call the program cannot make itself: ``sync()`` in the sync runner; ``async_()``
    in the async one (awaited when it returns an awaitable)."""

    sync: Callable[[], Any]
    async_: Callable[[], Any]


@dataclass(frozen=True, slots=True)
class Next:
    """The next item of ``iterator`` (an iterator or an async iterator), or ``END``."""

    iterator: Any


@dataclass(frozen=True, slots=True)
class Emit:
    """Text for the reader of a stream."""

    text: str


@dataclass(frozen=True, slots=True)
class Inline:
    """A program a tool returns instead of a result: the turn runs it in place, with the
    same runner (so a tool that edits the store needs no client of its own)."""

    program: Generator[Any, Any, Any]


class Abandoned(Exception):
    """Thrown into a streaming program whose reader stopped early: record what there is."""


END = object()  # what Next gives once the iterator is exhausted

Effect = Batch | Io | Next | Emit
Plan = Generator[Batch, list[Any], T]
Program = Generator[Effect, Any, T]
