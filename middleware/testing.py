"""Helpers for testing code that uses ``middleware`` (and for our own tests)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .events import _sinks, _sinks_lock

__all__ = ["capture_events"]


@contextmanager
def capture_events() -> Iterator[list[dict[str, Any]]]:
    """Collect the library's structlog events (debug level included) as dicts.

    >>> with capture_events() as events:
    ...     mgr.record_turn("s1", user="hi", assistant="hello")
    >>> [e["event"] for e in events]
    ['summary.updated', 'turn.recorded']
    """
    events: list[dict[str, Any]] = []
    with _sinks_lock:
        _sinks.append(events)
    try:
        yield events
    finally:
        with _sinks_lock:
            _sinks.remove(events)
