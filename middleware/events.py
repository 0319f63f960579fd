"""Debug and warning events, as structlog events on the stdlib ``middleware`` logger.

A library must not print on its own: the events go to ``logging.getLogger("middleware")``,
so they stay silent unless the application configures logging (warnings reach
stderr through logging's last-resort handler, as for any library). The seed's
console lines map to events::

    [CONTEXT] Set userinterface_name=google_tv   ->  context.set key=userinterface_name value=google_tv
    [SUMMARY] Updated: • goto shop → ...          ->  summary.updated line='• goto shop → ...'

``middleware.testing.capture_events()`` collects them in tests.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

import structlog

__all__ = ["capture", "debug_enabled", "log"]

# Open capture_events() blocks; process-wide so events from worker threads are caught too.
_sinks: list[list[dict[str, Any]]] = []
_sinks_lock = threading.Lock()


@contextmanager
def capture() -> Iterator[list[dict[str, Any]]]:
    """Collect every event (debug included) as dicts while the block runs."""
    events: list[dict[str, Any]] = []
    with _sinks_lock:
        _sinks.append(events)
    try:
        yield events
    finally:
        with _sinks_lock:
            _sinks.remove(events)


def _capture_processor(_logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    if _sinks:
        with _sinks_lock:
            for sink in _sinks:
                sink.append({**event_dict, "log_level": method})
    return event_dict


def _render(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    event = event_dict.pop("event")
    fields = " ".join(f"{key}={value!r}" for key, value in event_dict.items())
    return ((f"{event} {fields}" if fields else event),), {"extra": {"mw_event": event, "mw_fields": event_dict}}


_stdlib = logging.getLogger("middleware")


def debug_enabled() -> bool:
    """Whether a debug event would reach anyone: a capture, or a logger set to DEBUG.

    Callers check this before building debug events on the hot path.
    """
    return bool(_sinks) or _stdlib.isEnabledFor(logging.DEBUG)


log = structlog.wrap_logger(
    _stdlib,
    processors=[_capture_processor, structlog.stdlib.filter_by_level, _render],
    wrapper_class=structlog.stdlib.BoundLogger,
    cache_logger_on_first_use=True,
)
