"""Helpers for testing code that uses ``middleware`` (and for our own tests): capture the
library's events, start real ``redis-server`` processes (one, or a small cluster) on free
loopback ports, put a fault-injecting proxy in front of one, serve an app on loopback (a stand-in
OpenAI-compatible provider among them), and serve scripted models through litellm."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..events import capture
from .http import closed_by_server, mock_openai_app, serving
from .scripted import Responder, register, register_embedder
from .servers import FaultProxy, RedisCluster, RedisServer, free_port

__all__ = [
    "FaultProxy",
    "RedisCluster",
    "RedisServer",
    "Responder",
    "capture_events",
    "closed_by_server",
    "free_port",
    "mock_openai_app",
    "register",
    "register_embedder",
    "serving",
]


@contextmanager
def capture_events() -> Iterator[list[dict[str, Any]]]:
    """Collect the library's structlog events (debug level included) as dicts.

    >>> with capture_events() as events:
    ...     mgr.record_turn("s1", user="hi", assistant="hello")
    >>> [e["event"] for e in events]
    ['summary.updated', 'turn.recorded']
    """
    with capture() as events:
        yield events
