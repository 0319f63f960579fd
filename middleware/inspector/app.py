"""The memory inspector over HTTP: a JSON API and one page, served by `middleware inspect`.

    GET /                              the page (self-contained: no scripts or styles from elsewhere)
    GET /api/sessions?search=&page=&page_size=
    GET /api/session?id=…&include=context,summary,recent,notes,traces,conversation,prompt
                    &trace_limit=100&conversation_limit=50
    GET /api/health

Errors are JSON: 400 for bad parameters (integers up to 1,000,000,000) and for a Host
header that names another host, 401 without the token (when one is set: see
``create_app``), 404 for an unknown session, 503 when the store is unreachable (its password masked;
``/api/health`` too). Bad or missing records give partial results with ``warnings``,
never a server error.

Only the loopback names (``localhost``, ``127.0.0.1``, ``::1``) are answered unless
``allowed_hosts`` says otherwise: a web page whose name an attacker rebinds to 127.0.0.1
(DNS rebinding) reaches the port, but sends its own name as the Host.

Every response carries defence-in-depth headers (``security_headers``): a Content Security
Policy allowing only the page's own inline script and style (by hash) and requests to its
own origin, and no framing, sniffing or referrer.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Awaitable, Callable, Iterable
from importlib.resources import files
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..core.text import quoted, redact_secrets
from ..exceptions import InvalidInputError, StoreError
from ..session.manager import AsyncSessionManager, SessionManager
from ..store.sessions import MAX_PAGE
from .view import INCLUDES, MAX_LIMIT, listing, session_view

__all__ = ["LOOPBACK_HOSTS", "SecurityHeaders", "TrustedHosts", "create_app", "host_name", "security_headers"]

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
# Integer parameters: ASCII digits, at most this large (a longer string is not even parsed).
# Within it, pages below 1 mean page 1, sizes are cut to 1..200 and limits to 0..MAX_LIMIT.
MAX_INT = MAX_PAGE
_INTEGER = re.compile(r"[+-]?[0-9]{1,10}")


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _page() -> str:
    return (files("middleware.inspector") / "static" / "inspector.html").read_text(encoding="utf-8")


def _hashes(html: str, tag: str) -> str:
    """CSP sources allowing exactly the inline ``<tag>`` blocks of ``html``, by their SHA-256."""
    blocks = re.findall(rf"<{tag}>(.*?)</{tag}>", html, re.S)
    return " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(b.encode()).digest()).decode()}'" for b in blocks)


def security_headers(html: str) -> dict[str, str]:
    """The headers every response carries. The page is built with DOM calls (styles set through
    CSSOM, never as attributes), so its one inline script and one inline style are all it runs;
    it fetches only its own API, and its only image is the ``data:`` favicon."""
    policy = (
        f"default-src 'none'; script-src {_hashes(html, 'script')}; style-src {_hashes(html, 'style')}; "
        "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
    return {
        "Content-Security-Policy": policy,
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }


class SecurityHeaders:
    """ASGI middleware adding ``headers`` to every HTTP response (errors from outer layers too)."""

    def __init__(self, app: ASGIApp, headers: dict[str, str]) -> None:
        self.app = app
        self.headers = headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in self.headers.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, with_headers)


# A token must survive being sent: not empty, no spaces at its ends (the header's are cut)
# and no control characters (a header cannot carry them).
_SENDABLE = re.compile(r"[^\s\x00-\x1f\x7f-\x9f](?:[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f])?")
_SCHEME = re.compile(r"([!#$%&'*+.^_`|~0-9A-Za-z-]+)(?:[ \t]+(.*?))?[ \t]*", re.S)
_NO_TOKEN = (
    "missing or wrong token: send 'Authorization: Bearer <token>' (the token's UTF-8 bytes) or ?token=<token> "
    "(percent-encoded UTF-8); every token sent must be right"
)


def _authorized(request: Request, expected: bytes) -> bool:
    """Whether the request carries the token, and no wrong one. A Bearer header's value is
    compared as the bytes sent (Starlette decodes headers as latin-1, undone here), so a
    UTF-8 token works as curl or the page sends it; ``?token=`` is percent-decoded UTF-8.
    Every token given (header and each ``?token=``) must match, each compared in constant
    time and all of them compared, so a stale one next to a right one is refused."""
    given = [value.encode("utf-8") for value in request.query_params.getlist("token")]
    for value in request.headers.getlist("authorization"):
        scheme = _SCHEME.fullmatch(value.strip())
        if scheme and scheme.group(1).lower() == "bearer":  # RFC 7235: the scheme in any case
            given.append((scheme.group(2) or "").encode("latin-1"))
        # Another scheme (a proxy's Basic, say) is not a token: left alone. A bare token is read
        # as a scheme, so it is not a token either.
    matches = [hmac.compare_digest(value, expected) for value in given]
    return bool(matches) and all(matches)


def _int(request: Request, name: str, default: int | None) -> int | None:
    value = request.query_params.get(name)
    if value in (None, ""):
        return default
    if _INTEGER.fullmatch(value) and int(value) <= MAX_INT:
        return int(value)
    raise InvalidInputError(f"Parameter {name!r} has value {quoted(value, 40)}; expected an integer up to {MAX_INT:,}.")


def host_name(header: str) -> str:
    """The host a Host header (or an allowed-hosts entry) names: lowercased, without its port,
    a trailing dot or an IPv6 literal's brackets."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    name, colon, port = header.rpartition(":")
    return (name if colon and port.isdigit() and ":" not in name else header).rstrip(".")


class TrustedHosts:
    """ASGI middleware answering only requests whose Host header names one of ``allowed``
    (``"*"``: any host); others get a 400 that names the host. Starlette's own
    TrustedHostMiddleware cuts an IPv6 literal such as ``[::1]:8300`` at its first colon."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str]) -> None:
        self.app = app
        self.allowed = sorted({host_name(host) for host in allowed})
        self.any = "*" in self.allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and not self.any:
            host = Headers(scope=scope).get("host", "")
            if host_name(host) not in self.allowed:
                response = _error(400, f"Host {quoted(host, 100)} is not served here; expected one of {self.allowed}.")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(
    manager: SessionManager | AsyncSessionManager, *, token: str | None = None, allowed_hosts: Iterable[str] = LOOPBACK_HOSTS
) -> Starlette:
    """An ASGI app over a manager's store (a sync manager's calls run in worker threads).
    With ``token``, every request must carry it (``Authorization: Bearer …``, the scheme in
    any case, or ``?token=…``), and any other token it carries must be right too; a header
    without the Bearer scheme is refused. A token that cannot be sent (empty, with spaces at
    its ends or control characters) is an ``InvalidInputError`` here. Requests must name one of ``allowed_hosts`` in their Host header (loopback names by
    default; ``["*"]`` for any, behind a proxy that checks it)."""

    async def call(operation: str, *args: Any, **kwargs: Any) -> Any:
        method = getattr(manager, operation)
        if isinstance(manager, AsyncSessionManager):
            return await method(*args, **kwargs)
        return await run_in_threadpool(method, *args, **kwargs)

    if token is not None and not _SENDABLE.fullmatch(token):
        raise InvalidInputError(
            f"The inspector token {'is empty' if not token else 'has spaces at an end or control characters'}: "
            "it could not be sent in an Authorization header; expected printable characters (any language)."
        )
    expected = token.encode("utf-8") if token is not None else b""

    def guarded(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            if token is not None and not _authorized(request, expected):
                response = _error(401, _NO_TOKEN)
                response.headers["WWW-Authenticate"] = 'Bearer realm="middleware inspector"'
                return response
            try:
                return await handler(request)
            except InvalidInputError as exc:
                return _error(400, str(exc))
            except StoreError as exc:
                return _error(503, redact_secrets(str(exc)))

        return endpoint

    html = _page()

    async def page(request: Request) -> Response:
        return HTMLResponse(html)

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
            raise InvalidInputError(f"Unknown include {quoted(unknown, 100)}; expected some of {list(INCLUDES)}.")
        trace_limit = _int(request, "trace_limit", None)
        conversation_limit = _int(request, "conversation_limit", None)
        # Traces are read generously so the conversation view can collapse calls and results.
        reads = max(min(trace_limit or 100, MAX_LIMIT), min(conversation_limit or 50, MAX_LIMIT) * 4)
        raw = await call("inspect", session_id, traces=reads)
        if raw.state.is_empty and not raw.traces:
            return _error(404, f"no session {quoted(session_id, 100)}; expected a session id as /api/sessions lists them")
        view = session_view(raw, include=include, trace_limit=trace_limit, conversation_limit=conversation_limit)
        return JSONResponse(view)

    routes = [
        Route("/", guarded(page)),
        Route("/api/health", guarded(health)),
        Route("/api/sessions", guarded(sessions)),
        Route("/api/session", guarded(session)),
    ]
    app = Starlette(routes=routes)
    app.add_middleware(TrustedHosts, allowed=allowed_hosts)
    app.add_middleware(SecurityHeaders, headers=security_headers(html))  # outermost: on the Host check's 400 too
    return app
