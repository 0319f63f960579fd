"""HTTP helpers for tests: serve an ASGI app on loopback, and a stand-in OpenAI-compatible provider."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .servers import free_port

__all__ = ["mock_openai_app", "serving"]


@contextmanager
def serving(app: Any, *, port: int | None = None) -> Iterator[str]:
    """Serve an ASGI app with uvicorn in a thread on 127.0.0.1 (a free port unless given);
    yields its base URL, ``http://127.0.0.1:<port>``, and stops it afterwards.

    >>> with serving(create_app(config)) as url:
    ...     client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
    """
    import threading

    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port or free_port(), log_level="warning"))
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


def mock_openai_app(reply: str = "ok") -> Any:
    """A stand-in for an OpenAI-compatible provider that answers at once: every chat
    completion is ``reply`` (streamed word by word when asked), with usage. A model named
    ``error-<status>`` answers with that HTTP status in OpenAI's error shape instead."""
    import orjson
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    usage = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}

    def completion(model: str) -> bytes:
        message = {"role": "assistant", "content": reply}
        return orjson.dumps({"id": "chatcmpl-mock", "object": "chat.completion", "created": 0, "model": model, "usage": usage,
                             "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})  # fmt: skip

    def chunks(model: str) -> Iterator[bytes]:
        base = {"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0, "model": model}
        for word in reply.split(" "):
            delta = {"index": 0, "delta": {"role": "assistant", "content": word + " "}, "finish_reason": None}
            yield b"data: " + orjson.dumps({**base, "choices": [delta]}) + b"\n\n"
        yield b"data: " + orjson.dumps({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}) + b"\n\n"
        yield b"data: " + orjson.dumps({**base, "choices": [], "usage": usage}) + b"\n\n"
        yield b"data: [DONE]\n\n"

    async def chat(request: Request) -> Response:
        body = orjson.loads(await request.body())
        model = str(body.get("model", ""))
        if model.startswith("error-"):
            status = int(model.removeprefix("error-"))
            error = {"error": {"message": f"mock failure {status}", "type": "mock_error", "param": None, "code": None}}
            return Response(orjson.dumps(error), status_code=status, media_type="application/json")
        if body.get("stream"):
            return StreamingResponse(chunks(model), media_type="text/event-stream")
        return Response(completion(model), media_type="application/json")

    return Starlette(
        routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/chat/completions", chat, methods=["POST"])]
    )
