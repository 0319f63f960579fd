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

__all__ = ["UsageLog"]


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
