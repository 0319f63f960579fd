"""Tests for middleware.testing: the helpers users (and our own tests) drive Redis and a stand-in provider with."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from middleware import SessionManager
from middleware.testing import RedisServer, mock_openai_app, serving
from tests.conftest import require_binary


def test_redis_server_runs_a_session_store_and_stops(tmp_path: Path) -> None:
    """As a context manager it serves a real store on loopback, then is gone."""
    with RedisServer(tmp_path, binary=require_binary("redis-server")) as server:
        assert server.url.startswith("redis://127.0.0.1:")
        with SessionManager(redis_url=server.url) as mgr:
            assert mgr.record_turn("s", user="hello", assistant="hi") == 1
        proc = server.proc
        assert proc is not None and proc.poll() is None
    assert server.proc is None and proc.poll() is not None


def test_a_server_that_never_answers_is_stopped_not_left_behind(tmp_path: Path) -> None:
    """A failed start raises and leaves no process running."""
    server = RedisServer(tmp_path, binary=require_binary("redis-server"), extra=("--no-such-option", "x"))
    with pytest.raises(RuntimeError, match="did not answer"):
        server.start(timeout=0.5)
    assert server.proc is None


def _calls_weather(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
    """Says a word, then asks for the first tool offered."""
    call = {"id": "c1", "function": {"name": tools[0]["function"]["name"] if tools else "none", "arguments": {"city": "Oslo"}}}
    return {"role": "assistant", "content": "Checking  now.", "tool_calls": [call]}


def test_the_mock_provider_answers_with_its_responder_and_keeps_each_request() -> None:
    """A responder decides the reply (tool calls in OpenAI's shape), and each request body is kept, in order."""
    requests: list[dict[str, Any]] = []
    body = {"model": "m", "messages": [{"role": "user", "content": "weather?"}], "tools": [{"function": {"name": "weather"}}]}
    with serving(mock_openai_app(responder=_calls_weather, requests=requests)) as url:
        first = httpx.post(f"{url}/v1/chat/completions", json=body).json()
        again = httpx.post(f"{url}/v1/chat/completions", json=body).json()
    (choice,) = first["choices"]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "Checking  now."
    assert choice["message"]["tool_calls"] == [
        {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}
    ]
    assert requests == [body, body] and first["usage"] == again["usage"] and first["usage"]["prompt_tokens"] > 1


def test_the_mock_provider_streams_text_and_tool_call_deltas_then_the_finish_usage_and_done() -> None:
    """Streamed, the reply comes as OpenAI chunks: words, each call's head then arguments, finish_reason, usage, [DONE]."""
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}], "tools": [{"function": {"name": "w"}}]}
    with serving(mock_openai_app(responder=_calls_weather)) as url:
        lines = httpx.post(f"{url}/v1/chat/completions", json=body).text.split("\n\n")
    events = [line.removeprefix("data: ") for line in lines if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks[:-2]]
    assert deltas[0]["role"] == "assistant" and "".join(d.get("content") or "" for d in deltas) == "Checking  now."
    assert [d["tool_calls"] for d in deltas if "tool_calls" in d] == [
        [{"index": 0, "id": "c1", "type": "function", "function": {"name": "w", "arguments": ""}}],
        [{"index": 0, "function": {"arguments": '{"city": "Oslo"}'}}],
    ]
    assert chunks[-2]["choices"] == [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0
