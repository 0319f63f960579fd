"""The token usage log: one JSON line per LLM call, written through structlog.

A line holds when and for whom (time, session, turn, step within the turn's tool
loop, model, kind), what was sent (prompt tokens by layer, tool schemas included),
what the full history with every schema would have cost, the saving, what the
provider reported (prompt, completion, cached tokens), the cost in USD from litellm's
local price map, the latency, the number of tool calls, the schemas sent, and the
prompt-cache split of both sides with their effective costs (``cache``). Message content appears only when
``usage_log.include_content`` is true; keys and passwords never do (only the
fields below are written, never call options).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, TextIO

import structlog

from ..core.state import Prompt

__all__ = ["UsageLog", "usage_record"]


def usage_record(
    *,
    kind: str,
    session: str,
    turn: int,
    step: int,
    model: str,
    prompt: Prompt,
    loop_tokens: int,
    tools_tokens: int,
    full_history_tokens: int,
    provider: dict[str, int | None],
    cost_usd: float | None,
    price_per_token: float | None,
    latency_ms: float,
    tool_calls: int,
    cache: dict[str, Any] | None = None,
    tools: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The fields of one line. ``full_history_tokens`` is the whole prompt a chatbot that
    resends its full history with every tool schema would send for this call (0 for a call
    it would not make: one after a round that only loaded schemas). ``cache`` splits both
    sides into what the provider reads from its cache, writes and bills in full, with the
    effective costs (see ``middleware.billing``); ``tools`` says how many schemas were sent."""
    layers = prompt.tokens.as_dict()
    sent = prompt.tokens.total + loop_tokens + tools_tokens
    saved = full_history_tokens - sent
    line = {
        "kind": kind,
        "session": session,
        "turn": turn,
        "step": step,
        "model": model,
        "tokens": {
            **{k: v for k, v in layers.items() if k != "total"},
            "tool_loop": loop_tokens,
            "tools": tools_tokens,
            "total": sent,
        },
        "full_history_tokens": full_history_tokens,
        "saved_tokens": saved,
        "saved_pct": round(100 * saved / full_history_tokens, 1) if full_history_tokens else 0.0,
        "provider": provider,
        "cost_usd": cost_usd,
        "cost_saved_usd": saved * price_per_token if price_per_token is not None else None,
        "latency_ms": round(latency_ms, 2),
        "tool_calls": tool_calls,
    }
    if tools is not None:
        line["tools"] = tools
    if cache is not None:
        line["cache"] = cache
    return line


class UsageLog:
    """Appends usage lines to a file (opened on first write); thread-safe."""

    def __init__(self, path: str | Path | None, *, include_content: bool = False) -> None:
        self.path = Path(path) if path else None
        self.include_content = include_content
        self._file: TextIO | None = None
        self._logger: Any = None
        self._lock = threading.Lock()

    def _open(self) -> Any:
        assert self.path is not None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")
        self._logger = structlog.wrap_logger(
            structlog.WriteLogger(self._file),
            processors=[
                structlog.processors.TimeStamper(fmt="iso", utc=True, key="time"),
                structlog.processors.JSONRenderer(ensure_ascii=False),
            ],
            wrapper_class=structlog.BoundLogger,
        )
        return self._logger

    def write(self, record: dict[str, Any], *, content: dict[str, Any] | None = None) -> dict[str, Any]:
        """Write one line (content only if enabled); returns what was written."""
        line = {**record, **(content or {})} if self.include_content and content else dict(record)
        if self.path is None:
            return line
        with self._lock:
            logger = self._logger or self._open()
            logger.info("llm.call", **line)
        return line

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file, self._logger = None, None
