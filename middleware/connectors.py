"""Connectors: small providers of context that watch some part of the world.

Before each call a connector renders its *current state* as a few lines, which go into
the system prompt's ``## Current State`` section; after each recorded turn it may diff
its own state against what it saw before and report *observations* (one line each),
which the episodic archive keeps for recall. Either method may be ``async``. A
connector that raises costs one line saying it is unavailable and a
``connector.failed`` warning, never the call::

    class Screen(Connector):
        name = "screen"

        def render(self, session_id):
            return [f"device1 shows {lab.current('device1')}"]

        def observe(self, session_id, turn):
            now = lab.current("device1")
            changed, self.last = now != self.last, now
            return [f"device1 moved to {now}"] if changed else []

    mgr = SessionManager(connectors=[Screen()])
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable
from typing import Any

from .core.effects import Io, Program
from .core.state import Turn
from .core.text import one_line
from .events import log

__all__ = ["Connector", "connector_lines", "connector_observations"]

_LINES = 20  # lines one connector may contribute per call


class Connector:
    """Override ``render`` and/or ``observe`` (plain or ``async def``); ``name`` labels its lines."""

    name: str = "connector"

    def render(self, session_id: str) -> Iterable[str]:
        """The current state, a few lines (none by default)."""
        return ()

    def observe(self, session_id: str, turn: Turn) -> Iterable[str]:
        """What changed since the last turn, one line per observation (none by default)."""
        return ()


def _blocking(method: Callable[..., Any], *args: Any) -> Any:
    result = method(*args)
    return asyncio.run(_awaited(result)) if inspect.isawaitable(result) else result


async def _awaited(value: Any) -> Any:
    return await value


def _awaitable(method: Callable[..., Any], *args: Any) -> Any:
    """Under the async runner: an async method awaited, a plain one in a worker thread."""
    return method(*args) if inspect.iscoroutinefunction(method) else asyncio.to_thread(method, *args)


def _ask(connector: Connector, stage: str, *args: Any) -> Program[list[str]]:
    method = getattr(connector, stage)
    name = one_line(str(getattr(connector, "name", type(connector).__name__)), 40) or "connector"
    try:
        found = yield Io(lambda: _blocking(method, *args), lambda: _awaitable(method, *args))
        lines = [one_line(str(line), 300) for line in list(found or ())[:_LINES]]
    except Exception as exc:  # a connector is user code: it costs a line, never the call
        log.warning("connector.failed", connector=name, stage=stage, error=type(exc).__name__)
        return [f"{name}: unavailable ({type(exc).__name__})"] if stage == "render" else []
    return [f"{name}: {line}" for line in lines if line]


def connector_lines(connectors: Iterable[Connector], session_id: str) -> Program[list[str]]:
    """Every connector's current-state lines, in order."""
    lines: list[str] = []
    for connector in connectors:
        lines += yield from _ask(connector, "render", session_id)
    return lines


def connector_observations(connectors: Iterable[Connector], session_id: str, turn: Turn) -> Program[list[str]]:
    """What every connector observed after ``turn``."""
    lines: list[str] = []
    for connector in connectors:
        lines += yield from _ask(connector, "observe", session_id, turn)
    return lines
