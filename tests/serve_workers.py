"""The endpoint in a process of its own, for the scale-out tests (importable by spawned processes)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from middleware import Config
from middleware.testing import register

TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
    }
]


def gated(messages: Sequence[Mapping[str, Any]], tools: Any) -> dict[str, Any]:
    """Replies to "<file> | <text>" once <file> exists (at most a minute), so a test decides when
    a request finishes; to a tool result with the result; to anything else, with tools, by asking for get_weather."""
    last = messages[-1]
    if last["role"] == "tool":
        return {"role": "assistant", "content": f"weather: {last['content']}"}
    text = str(last["content"])
    if tools:
        call = {"id": f"call-{time.monotonic_ns()}", "function": {"name": "get_weather", "arguments": json.dumps({"city": text})}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    gate, _, said = text.partition(" | ")
    if said:
        deadline = time.monotonic() + 60
        while not Path(gate).exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    return {"role": "assistant", "content": f"done: {said or text}"}


def config_for(redis_url: str, log_path: str, *, cluster: bool = False, wait: float = 3600) -> Config:
    return Config().with_overrides(store={"url": redis_url, "cluster": cluster}, usage_log={"path": log_path},
                                   traces={"max_entries": 10_000}, serve={"order_wait_seconds": wait})  # fmt: skip


def serve_endpoint(redis_url: str, port: int, log_path: str) -> None:
    """Run the endpoint on ``port`` until terminated."""
    import uvicorn

    from middleware.serve import create_app

    register("gated", gated)
    uvicorn.run(create_app(config_for(redis_url, log_path)), host="127.0.0.1", port=port, log_level="warning")
