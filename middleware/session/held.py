"""Turns held through a store outage (``store.on_store_error: degrade``): kept in this
process, oldest first, within ``store.max_pending_turns`` and ``store.max_pending_bytes``,
and written before anything else on their own session's next call that reaches the store.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import orjson

from ..config.service import StoreConfig
from ..core.effects import Program
from ..core.state import TurnUpdate
from ..core.text import redact_secrets
from ..events import log
from ..exceptions import StoreError, StoreUnavailableError
from ..store.record import Recorded
from .embedder import Embedder

__all__ = ["HeldTurns"]

# Writes one held turn (session, update, its pieces' vectors) and says what the store did.
Write = Callable[[str, TurnUpdate, tuple[bytes, ...]], Program[Recorded]]


def _size(update: TurnUpdate) -> int:
    """About how many bytes a held turn keeps in memory (its text, prompt and trace)."""
    text = len(update.summary_line) + len(update.prompt) + sum(len(m.content) for m in update.recent)
    return 256 + text + sum(len(k) + len(v) for k, v in update.context) + len(orjson.dumps(update.traces))


class HeldTurns:
    """The turns the store could not take; thread-safe."""

    def __init__(self, limits: StoreConfig, embedder: Embedder, write: Write, shown: Callable[[str], str]) -> None:
        self.limits, self.embedder, self.write, self.shown = limits, embedder, write, shown
        # (session, update, bytes held, its pieces' vectors if they were made before the
        # store failed, else None: made when it is written)
        self._held: deque[tuple[str, TurnUpdate, int, tuple[bytes, ...] | None]] = deque()
        self._bytes = 0
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self._held)

    @property
    def turns(self) -> list[tuple[str, TurnUpdate]]:
        """The held turns, oldest first."""
        with self._lock:
            return [(session_id, update) for session_id, update, _, _ in self._held]

    def hold(self, session_id: str, update: TurnUpdate, error: StoreError, vectors: tuple[bytes, ...] | None) -> None:
        """Keep a turn the store did not take. Past max_pending_bytes, held vectors go first
        (they are made again when the turn is written), then the oldest turns."""
        size = _size(update) + sum(map(len, vectors or ()))
        limits = self.limits
        with self._lock:
            if vectors and self._bytes + size > limits.max_pending_bytes:
                size, vectors = size - sum(map(len, vectors)), None
            for index, (sid, held, held_size, held_vectors) in enumerate(self._held):
                if self._bytes + size <= limits.max_pending_bytes:
                    break
                if held_vectors:
                    freed = sum(map(len, held_vectors))
                    self._held[index] = (sid, held, held_size - freed, None)
                    self._bytes -= freed
            while self._held and (len(self._held) >= limits.max_pending_turns or self._bytes + size > limits.max_pending_bytes):
                dropped, _, dropped_size, _ = self._held.popleft()
                self._bytes -= dropped_size
                log.error(
                    "store.pending_overflow", session=dropped, turns=limits.max_pending_turns, bytes=limits.max_pending_bytes
                )
            self._held.append((session_id, update, size, vectors))
            self._bytes += size
            waiting = len(self._held)
        log.warning("store.turn_not_recorded", session=session_id, pending=waiting, line=self.shown(update.summary_line),
                    error=redact_secrets(str(error)))  # fmt: skip

    def flush(self, session_id: str | None, *, tolerate: bool = False) -> Program[int]:
        """Write the held turns of ``session_id`` (None: of every session) first, in order;
        one that did reach Redis is not written twice. Returns how many were written.

        A session's held turns never hold up another session. With ``tolerate``, a store
        that refuses them (a write refused for memory, say) is a warning and the caller
        goes on; an unreachable one is still an error."""
        with self._lock:
            held = [item for item in self._held if session_id is None or item[0] == session_id]
        written, failed, embedding = 0, set(), True
        made: dict[int, tuple[bytes, ...]] = {}  # vectors made for held turns, by id of their update
        for index, (sid, update, _, vectors) in enumerate(held):
            if sid in failed:
                continue  # keep this session's order: nothing after a turn that failed
            try:
                # A turn held before its vectors were made gets them now, so semantic recall
                # finds it too: with the held turns after it, a few calls rather than one per
                # turn, and kept with them in case the write fails.
                if vectors is None and update.pieces and id(update) not in made and embedding:
                    made.update((yield from self._vectors([u for _, u, _, v in held[index:] if v is None and u.pieces])))
                    embedding = id(update) in made  # a call that failed is not tried again in this flush
                encoded = vectors if vectors is not None else made.get(id(update), ())
                recorded = yield from self.write(sid, update, encoded)
            except StoreError as exc:
                if session_id is not None and (not tolerate or isinstance(exc, StoreUnavailableError)):
                    raise
                failed.add(sid)
                log.warning("store.pending_not_recorded", session=sid, error=redact_secrets(str(exc)))
                continue
            self._forget(update)
            written += 1
            log.info("store.pending_recorded" if recorded.written else "store.pending_already_recorded", session=sid,
                     turn=recorded.turns)  # fmt: skip
        return written

    def _forget(self, update: TurnUpdate) -> None:
        with self._lock:  # by its update: its vectors may have been let go meanwhile
            entry = next((entry for entry in self._held if entry[1] is update), None)
            if entry is not None:
                self._held.remove(entry)
                self._bytes -= entry[2]

    def _vectors(self, updates: list[TurnUpdate]) -> Program[dict[int, tuple[bytes, ...]]]:
        """The vectors of the first held turns of ``updates`` (see ``Embedder.pieces``), kept
        with the held turns too, within max_pending_bytes, so a write that fails does not
        have them made again."""
        made: dict[int, Any] = yield from self.embedder.pieces(updates)
        with self._lock:
            for index, (sid, held, size, kept) in enumerate(self._held):
                encoded = made.get(id(held))
                if kept is None and encoded:
                    extra = sum(map(len, encoded))
                    if self._bytes + extra > self.limits.max_pending_bytes:
                        break
                    self._held[index] = (sid, held, size + extra, encoded)
                    self._bytes += extra
        return made
