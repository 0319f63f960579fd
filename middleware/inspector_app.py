"""The memory inspector over HTTP: a JSON API and one page, served by `middleware inspect`.

    GET /                              the page (self-contained: no scripts or styles from elsewhere)
    GET /api/sessions?search=&page=&page_size=
    GET /api/session?id=…&include=context,summary,recent,notes,traces,conversation,prompt
                    &trace_limit=100&conversation_limit=50
    GET /api/health

Errors are JSON: 400 for bad parameters, 401 without the token (when one is set),
404 for an unknown session, 503 when the store is unreachable (its password
masked; ``/api/health`` too). Bad or missing records give partial results with
``warnings``, never a server error.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from importlib.resources import files
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from .core.text import redact_secrets
from .exceptions import InvalidInputError, StoreError
from .inspector import INCLUDES, listing, session_view
from .manager import AsyncSessionManager, SessionManager

__all__ = ["create_app"]


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _int(request: Request, name: str, default: int | None) -> int | None:
    value = request.query_params.get(name)
    if value in (None, ""):
        return default
    try:
        return int(value)
    except ValueError:
        raise InvalidInputError(f"Parameter {name!r} has value {value!r}; expected an integer.") from None


def create_app(manager: SessionManager | AsyncSessionManager, *, token: str | None = None) -> Starlette:
    """An ASGI app over a manager's store (a sync manager's calls run in worker threads).
    With ``token``, every request must carry it (``Authorization: Bearer …`` or ``?token=…``)."""

    async def call(operation: str, *args: Any, **kwargs: Any) -> Any:
        method = getattr(manager, operation)
        if isinstance(manager, AsyncSessionManager):
            return await method(*args, **kwargs)
        return await run_in_threadpool(method, *args, **kwargs)

    def guarded(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            if token is not None:
                given = (
                    request.query_params.get("token") or request.headers.get("authorization", "").removeprefix("Bearer ").strip()
                )
                if not hmac.compare_digest(given.encode(), token.encode()):
                    return _error(401, "missing or wrong token")
            try:
                return await handler(request)
            except InvalidInputError as exc:
                return _error(400, str(exc))
            except StoreError as exc:
                return _error(503, redact_secrets(str(exc)))

        return endpoint

    async def page(request: Request) -> Response:
        return HTMLResponse((files("middleware") / "static" / "inspector.html").read_text(encoding="utf-8"))

    async def health(request: Request) -> Response:
        await call("ping")  # StoreError: 503
        return JSONResponse({"ok": True, "store": repr(manager.store)})

    async def sessions(request: Request) -> Response:
        search = request.query_params.get("search") or None
        page_number = _int(request, "page", 1) or 1
        page_size = _int(request, "page_size", 20) or 20
        result = await call("list_sessions", search=search, page=page_number, page_size=page_size)
        return JSONResponse(listing(result))

    async def session(request: Request) -> Response:
        if "id" not in request.query_params:
            raise InvalidInputError("Parameter 'id' (the session id) is required.")
        session_id = request.query_params["id"]
        include = [p.strip() for p in (request.query_params.get("include") or ",".join(INCLUDES)).split(",") if p.strip()]
        unknown = sorted(set(include) - set(INCLUDES))
        if unknown:
            raise InvalidInputError(f"Unknown include {unknown}; expected some of {list(INCLUDES)}.")
        trace_limit = _int(request, "trace_limit", None)
        conversation_limit = _int(request, "conversation_limit", None)
        # Traces are read generously so the conversation view can collapse calls and results.
        raw = await call("inspect", session_id, traces=max(trace_limit or 100, (conversation_limit or 50) * 4))
        if raw.state.is_empty and not raw.traces:
            return _error(404, f"no session {session_id[:100]!r}")
        view = session_view(raw, include=include, trace_limit=trace_limit, conversation_limit=conversation_limit)
        return JSONResponse(view)

    routes = [
        Route("/", guarded(page)),
        Route("/api/health", guarded(health)),
        Route("/api/sessions", guarded(sessions)),
        Route("/api/session", guarded(session)),
    ]
    return Starlette(routes=routes)
