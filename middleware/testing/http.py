"""HTTP helpers for tests: serve an ASGI app on loopback, and a stand-in OpenAI-compatible provider."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from .scripted import Responder
from .servers import free_port

__all__ = ["closed_by_server", "mock_openai_app", "serving"]


@contextmanager
def serving(app: Any, *, port: int | None = None, **options: Any) -> Iterator[str]:
    """Serve an ASGI app with uvicorn in a thread on 127.0.0.1 (a free port unless given);
    yields its base URL, ``http://127.0.0.1:<port>``, and stops it afterwards. ``options``
    go to uvicorn; an endpoint (``create_app``) is served as ``middleware serve`` serves it.

    >>> with serving(create_app(config)) as url:
    ...     client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
    """
    import threading

    import uvicorn

    endpoint = getattr(app.state, "endpoint", None) if hasattr(app, "state") else None
    if endpoint is not None:
        from ..serve.server import options as served_as

        options = {**served_as(endpoint.serve), **options}
    options.setdefault("log_level", "warning")
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port or free_port(), **options))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.005)
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def mock_openai_app(
    reply: str = "ok", *, responder: Responder | None = None, requests: list[dict[str, Any]] | None = None
) -> Any:
    """A stand-in for an OpenAI-compatible provider that answers at once, with usage.

    Every chat completion is ``reply``, or what ``responder(messages, tools)`` answers for the
    request (an assistant message: text, ``tool_calls`` or both; a call's ``arguments`` may be
    a dict or JSON text, and its ``id`` is made up from its position when missing). ``requests``,
    when given, gets each request's parsed JSON body appended, in arrival order. A model named
    ``error-<status>`` answers with that HTTP status in OpenAI's error shape instead.

    Streamed (``"stream": true``), the reply comes as OpenAI's chunks: the text word by word
    (the deltas join to the text exactly), then each tool call (its id, type and name with
    empty arguments, then its arguments), then a chunk with the ``finish_reason``
    (``tool_calls`` or ``stop``), then one with the usage and no choices, then ``[DONE]``.

    Usage is counted roughly but deterministically: a token per four characters of the JSON
    of the request's messages and tools (prompt), and of the reply's text and arguments
    (completion), at least one each."""
    import orjson
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    def constant(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None) -> Mapping[str, Any]:
        return {"role": "assistant", "content": reply, "tool_calls": None}

    answer = responder or constant

    async def chat(request: Request) -> Response:
        body = orjson.loads(await request.body())
        if requests is not None:
            requests.append(body)
        model = str(body.get("model", ""))
        if model.startswith("error-"):
            status = int(model.removeprefix("error-"))
            error = {"error": {"message": f"mock failure {status}", "type": "mock_error", "param": None, "code": None}}
            return Response(orjson.dumps(error), status_code=status, media_type="application/json")
        message = _message(answer(body.get("messages") or [], body.get("tools")))
        usage = _usage(body, message)
        if body.get("stream"):
            return StreamingResponse(_chunks(model, message, usage), media_type="text/event-stream")
        return Response(orjson.dumps(_completion(model, message, usage)), media_type="application/json")

    return Starlette(
        routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/chat/completions", chat, methods=["POST"])]
    )


def _message(given: Mapping[str, Any]) -> dict[str, Any]:
    """A responder's message in OpenAI's shape: typed calls with JSON-text arguments, ids filled in."""
    calls = []
    for index, call in enumerate(given.get("tool_calls") or ()):
        function = call.get("function") or {}
        arguments = function.get("arguments") or {}
        arguments = arguments if isinstance(arguments, str) else json.dumps(arguments)
        calls.append({"id": str(call.get("id") or f"call_{index}"), "type": "function",
                      "function": {"name": str(function.get("name") or ""), "arguments": arguments}})  # fmt: skip
    content = given.get("content")
    return {"role": "assistant", "content": None if content is None else str(content), "tool_calls": calls or None}


def _tokens(value: Any) -> int:
    import orjson

    return max(1, len(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)) // 4)


def _usage(body: Mapping[str, Any], message: Mapping[str, Any]) -> dict[str, int]:
    prompt = _tokens([body.get("messages"), body.get("tools")])
    arguments = [call["function"]["arguments"] for call in message["tool_calls"] or ()]
    completion = _tokens([message["content"] or "", *arguments])
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _finish(message: Mapping[str, Any]) -> str:
    return "tool_calls" if message["tool_calls"] else "stop"


def _completion(model: str, message: dict[str, Any], usage: dict[str, int]) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "message": {k: v for k, v in message.items() if v is not None or k == "content"},
              "finish_reason": _finish(message)}  # fmt: skip
    return {"id": "chatcmpl-mock", "object": "chat.completion", "created": 0, "model": model, "usage": usage, "choices": [choice]}


def _deltas(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The message as stream deltas, as OpenAI sends them: its words (whitespace kept), then
    each call's head (id, type, name, empty arguments) and its arguments; the first says the role."""
    text = message["content"]
    deltas: list[dict[str, Any]] = [{"content": word} for word in re.findall(r"\s*\S+\s*|\s+", text or "")]
    for index, call in enumerate(message["tool_calls"] or ()):
        function = {"name": call["function"]["name"], "arguments": ""}
        deltas.append({"tool_calls": [{"index": index, "id": call["id"], "type": "function", "function": function}]})
        deltas.append({"tool_calls": [{"index": index, "function": {"arguments": call["function"]["arguments"]}}]})
    opening = {"role": "assistant", "content": None if text is None else ""}
    deltas[:1] = [{**opening, **deltas[0]}] if deltas else [opening]
    return deltas


def _chunks(model: str, message: Mapping[str, Any], usage: dict[str, int]) -> Iterator[bytes]:
    import orjson

    base = {"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0, "model": model}
    choices: list[list[dict[str, Any]]] = [[{"index": 0, "delta": delta, "finish_reason": None}] for delta in _deltas(message)]
    choices.append([{"index": 0, "delta": {}, "finish_reason": _finish(message)}])
    for choice in choices:
        yield b"data: " + orjson.dumps({**base, "choices": choice}) + b"\n\n"
    yield b"data: " + orjson.dumps({**base, "choices": [], "usage": usage}) + b"\n\n"
    yield b"data: [DONE]\n\n"


def closed_by_server(connections: Iterable[socket.socket], *, wait: float = 0.5) -> int:
    """How many of ``connections`` the server at their other end has closed (an end of
    stream or a reset within ``wait`` seconds each); each is closed here afterwards."""
    closed = 0
    for connection in connections:
        connection.settimeout(wait)
        try:
            closed += connection.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            closed += 1
        except OSError:  # still open when the wait ran out
            pass
        connection.close()
    return closed
