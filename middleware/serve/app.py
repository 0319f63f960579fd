"""The OpenAI-compatible endpoint as a Starlette app, served by ``middleware serve``.

    POST /v1/chat/completions   non-streaming and SSE streaming, tools and tool_choice
    GET  /v1/models             the model names clients may ask for
    GET  /health                200 once the store answers, 503 when it does not

A request names its session with the ``X-Session-Id`` header, else its ``user`` field,
else ``metadata.session_id``; one that names none is sent upstream untouched (and logged
as a passthrough). Upstream keys come from the environment (litellm reads them); client
keys (``serve.api_keys``) are checked as bearer tokens when configured, and each belongs to
a tenant: a session id names a session of the key's tenant only, whatever the header, the
``user`` field or the metadata say (its keys live under the tenant's own prefix). Provider
errors keep their HTTP status in OpenAI's error shape.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import secrets
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from .. import llm
from ..config.schema import Config
from ..core.effects import Program
from ..core.text import redact_secrets, redact_url
from ..events import log
from ..exceptions import InvalidInputError, InvalidRequestError, InvalidSessionIdError, LLMError, StoreError
from ..runner import arun
from ..session.engine import Engine
from ..store.drivers import AsyncRedisStore, AsyncSessionStore
from .metrics import Metrics, request_figures
from .session import SessionRequests, UpstreamError, dumped, provider_error
from .turns import Exchange, Retried, Turns
from .wire import Request, error_body, read_request, sse

__all__ = ["Endpoint", "create_app"]

Handler = Callable[[HttpRequest], Awaitable[Response]]
PASSED = "no session named: passed upstream without memory"


# What an access line shows of a value the client chose, at most (a bad request may carry megabytes).
_LOGGED = 80


def _clipped(value: Any) -> str:
    """A client's session id or model name as an access line shows it: "-" when absent, cut short."""
    if not isinstance(value, str) or not value:
        return "-"
    return value if len(value) <= _LOGGED else value[: _LOGGED - 1] + "…"


REFUSED = ""  # the figures of requests refused for their key (no tenant is named "")


def _error(status: int, message: str, *, param: str | None = None, code: str | None = None) -> JSONResponse:
    # A body too large or too slow is not read to its end: the connection closes after the answer.
    headers = {"Connection": "close"} if status in (408, 413) else None
    return JSONResponse(error_body(status, message, param=param, code=code), status_code=status, headers=headers)


class Endpoint:
    """The endpoint over one config and one store; ``app`` is the ASGI app."""

    def __init__(self, config: Config, *, store: AsyncSessionStore | None = None) -> None:
        self.config, self.serve = config, config.serve
        self.engine = Engine(config)
        self.store = store if store is not None else AsyncRedisStore.from_url(config.store.url, config.store)
        self.keys = self.serve.tenants()
        # The turns of each tenant (None: no keys, one shared space), made on a tenant's first request.
        self.tenants: dict[str | None, Turns] = {None: Turns.of_tenant(self.engine, config, None)}
        self.sessions = SessionRequests(self._run)
        # What each tenant's requests counted (None: no keys, one space; REFUSED: requests refused for their key).
        self.metrics: dict[str | None, Metrics] = {}
        routes = [
            Route("/v1/chat/completions", self._guarded(self.completions, "/v1/chat/completions"), methods=["POST"]),
            Route("/v1/models", self._guarded(self.models, "/v1/models"), methods=["GET"]),
            Route("/metrics", self._guarded(self.scrape, "/metrics"), methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
        ]
        handlers = {404: self._not_found, 405: self._not_found, Exception: self._failed}
        self.app = Starlette(routes=routes, lifespan=self._lifespan, exception_handlers=handlers)
        self.app.state.endpoint = self  # how it is served: middleware.serve.server.options(self.serve)

    @staticmethod
    async def _not_found(request: HttpRequest, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        what = "does not exist" if status == 404 else f"does not take {request.method[:10]}"
        return _error(status, f"{request.url.path[:100]!r} {what}; the endpoint serves POST /v1/chat/completions, "
                              "GET /v1/models, GET /health and GET /metrics.", code="not_found" if status == 404 else "method_not_allowed")  # fmt: skip

    @staticmethod
    async def _failed(request: HttpRequest, exc: Exception) -> Response:
        log.error("serve.failed", path=request.url.path[:100], error=type(exc).__name__)
        return _error(500, "The endpoint failed on this request; it was not completed. Try again.", code="internal_error")

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        llm.litellm()  # import and set up litellm before the first request, not during it
        try:
            await self._run(self.engine.ping())
        except StoreError as exc:
            log.warning("serve.store_unreachable", store=redact_url(self.config.store.url), error=redact_secrets(str(exc))[:200],
                        hint="requests that name a session get 503 until the store answers")  # fmt: skip
        yield
        self.sessions.closing = True  # turns held through an outage are tried once more
        while self.sessions.tasks:  # a task may start another (a held turn paid, then followed)
            await asyncio.gather(*tuple(self.sessions.tasks), return_exceptions=True)
        await self.store.close()
        self.engine.close()

    def _run(self, program: Program[Any]) -> Awaitable[Any]:
        return arun(program, self.store.send)

    # --- the guard: keys and errors ------------------------------------------------------------

    def _tenant(self, request: HttpRequest) -> str | bool | None:
        """The tenant of the request's bearer key (None when no keys are set); False when the
        key is missing or wrong. Every key is compared, so the time taken does not say which
        one matched."""
        if not self.keys:
            return None
        scheme, _, given = request.headers.get("authorization", "").strip().partition(" ")
        token = given.strip().encode() if scheme.lower() == "bearer" else b""
        found: str | bool = False
        for key, tenant in self.keys:
            if hmac.compare_digest(token, key) and token:
                found = tenant
        return found

    def metrics_of(self, tenant: str | bool | None) -> Metrics:
        """The figures of ``tenant``'s requests (False: of those refused for their key)."""
        key = REFUSED if tenant is False else tenant if isinstance(tenant, str) else None
        found = self.metrics.get(key)
        if found is None:
            found = self.metrics[key] = Metrics()
        return found

    def turns_of(self, tenant: str | None) -> Turns:
        """The turns of ``tenant``'s sessions: its own engine over its own key prefix, sharing the usage log."""
        turns = self.tenants.get(tenant)
        if turns is None:
            turns = self.tenants[tenant] = Turns.of_tenant(self.engine, self.config, tenant)
        return turns

    def _guarded(self, handler: Handler, route: str) -> Handler:
        """``handler`` behind the key check, with every error in OpenAI's shape, counted and
        logged as one access line (a stream's once it ends)."""

        async def endpoint(request: HttpRequest) -> Response:
            started = time.perf_counter()
            request.state.tenant = tenant = self._tenant(request)
            request.state.session = request.state.model = request.state.lines = None
            if tenant is False:
                response: Response = _error(401, "Incorrect or missing API key: send 'Authorization: Bearer <key>'.",
                                            code="invalid_api_key")  # fmt: skip
            else:
                response = await self._answer(handler, request)
            if isinstance(response, StreamingResponse):
                response.body_iterator = self._logged(response.body_iterator, request, route, started, response.status_code)
            else:
                self._access(request, route, response.status_code, started)
            return response

        return endpoint

    async def _answer(self, handler: Handler, request: HttpRequest) -> Response:
        try:
            response = await handler(request)
        except InvalidRequestError as exc:
            return _error(exc.status, str(exc), param=exc.param, code=exc.code)
        except InvalidInputError as exc:
            return _error(400, str(exc), param="messages")
        except StoreError as exc:
            self.metrics_of(request.state.tenant).error("store")
            log.error("serve.store_failed", error=redact_secrets(str(exc)))
            return _error(503, "The session store is unavailable; try again.", code="store_unavailable")
        except Exception as exc:  # a fault of the endpoint itself: logged, never shown
            self.metrics_of(request.state.tenant).error("internal")
            log.error("serve.failed", path=request.url.path[:100], error=type(exc).__name__)
            return _error(500, "The endpoint failed on this request; it was not completed. Try again.", code="internal_error")
        if isinstance(response, UpstreamError):
            self.metrics_of(request.state.tenant).error("upstream")
        return response

    async def _logged(
        self, body: AsyncIterable[Any], request: HttpRequest, route: str, started: float, status: int
    ) -> AsyncIterator[Any]:
        try:
            async for part in body:
                yield part
        finally:
            self._access(request, route, status, started)

    def _access(self, request: HttpRequest, route: str, status: int, started: float) -> None:
        """Count the request and log its access line."""
        seconds, state = time.perf_counter() - started, request.state
        figures = request_figures(state.lines or ())
        self.metrics_of(state.tenant).request(route, status, seconds, figures)
        if self.serve.access_log:
            # The session and model are the client's, read before they were checked: cut short.
            log.info("serve.access", method=request.method, route=route, status=status,
                     tenant=state.tenant if isinstance(state.tenant, str) else "-", session=_clipped(state.session),
                     model=_clipped(state.model), latency_ms=round(seconds * 1000, 1), **figures)  # fmt: skip

    # --- routes ---------------------------------------------------------------------------------

    async def health(self, request: HttpRequest) -> Response:
        try:
            await self._run(self.engine.ping())
        except StoreError:
            return _error(503, "The session store is unavailable.", code="store_unavailable")
        return JSONResponse({"ok": True})

    async def scrape(self, request: HttpRequest) -> Response:
        """The caller's tenant's figures, with those of requests refused for their key (no
        tenant's): never another tenant's."""
        parts = [self.metrics_of(request.state.tenant), *([self.metrics_of(False)] if self.keys else [])]
        shown = Metrics.total(parts)
        return PlainTextResponse(shown.render(), media_type="text/plain; version=0.0.4")

    async def models(self, request: HttpRequest) -> Response:
        names = list(self.serve.models) or [self.config.model]
        return JSONResponse({"object": "list", "data": [{"id": n, "object": "model", "created": 0, "owned_by": "middleware"}
                                                        for n in names]})  # fmt: skip

    def upstream(self, chat: Request) -> tuple[str, Request]:
        """The litellm model a client's model name stands for, and the request with its options."""
        target = self.serve.upstream(chat.model)
        if target is None:
            raise InvalidRequestError(f"The model {chat.model[:100]!r} does not exist; GET /v1/models lists the models served.",
                                      param="model", status=404, code="model_not_found")  # fmt: skip
        if target.api_base:
            chat = dataclasses.replace(chat, options={**chat.options, "api_base": target.api_base})
        return target.model, chat

    async def _body(self, request: HttpRequest) -> bytes:
        """The request's body, counted as it arrives (chunked too) and read within
        serve.body_timeout_seconds: 413 past serve.max_body_bytes, 408 past the timeout."""
        limit, too_large = (
            self.serve.max_body_bytes,
            f"The request body is larger than {self.serve.max_body_bytes:,} bytes (serve.max_body_bytes).",
        )
        try:
            declared = int(request.headers.get("content-length") or 0)
        except ValueError:
            raise InvalidRequestError("The Content-Length header is not a number.") from None
        if declared > limit:
            raise InvalidRequestError(too_large, status=413)

        async def read() -> bytes:
            parts, size = [], 0
            async for part in request.stream():
                size += len(part)
                if size > limit:
                    raise InvalidRequestError(too_large, status=413)
                parts.append(part)
            return b"".join(parts)

        try:
            return await asyncio.wait_for(read(), self.serve.body_timeout_seconds)
        except TimeoutError:
            raise InvalidRequestError(f"The request body took longer than {self.serve.body_timeout_seconds:g} s to arrive "
                                      "(serve.body_timeout_seconds).", status=408, code="timeout") from None  # fmt: skip

    async def completions(self, request: HttpRequest) -> Response:
        upstream, chat = self.upstream(read_request(await self._body(request), request.headers))
        request.state.session, request.state.model = chat.session, chat.model
        turns = self.turns_of(request.state.tenant)
        if chat.session is None:
            if self.serve.without_session == "reject":
                raise InvalidRequestError("The request names no session: send the X-Session-Id header, the 'user' field "
                                          "or metadata.session_id (serve.without_session is reject).",
                                          param="X-Session-Id", code="session_required")  # fmt: skip
            request.state.lines = []
            response = await (self._passthrough_stream(turns, chat, upstream, request.state.lines) if chat.stream
                              else self._passthrough(turns, chat, upstream, request.state.lines))  # fmt: skip
            response.headers["X-Middleware-Warning"] = PASSED
            return response
        if chat.options.get("n", 1) != 1:
            raise InvalidRequestError(f"'n' has value {chat.options['n']!r}; a session's turn records one reply, so only 1 is served.",
                                      param="n")  # fmt: skip
        session, nonce = chat.session, secrets.token_hex(8)
        begun: list[Exchange] = []
        handled = False  # the handler returned (a stream's turn may run on)

        def begin(retry: bool) -> Program[Exchange | Retried]:
            return turns.begin(session, chat.messages, chat.tools, upstream, tool_choice=chat.options.get("tool_choice"),
                               refer=not chat.options.get("api_base"), key=chat.key, retry=retry, nonce=nonce,
                               keyed=chat.keyed)  # fmt: skip

        # A retry of this request waits while it runs: until its answer is kept (or it has none to keep).
        self.sessions.heartbeat(turns, session, nonce, lambda: handled and (not begun or begun[0].owed is False))
        try:
            try:
                exchange = await self._run(begin(chat.retry))
            except InvalidSessionIdError as exc:
                raise InvalidRequestError(f"{chat.session_from}: {exc}", param=chat.session_from) from None
            if isinstance(exchange, Retried):  # the client sent it again: the first attempt's answer, not a second turn
                replayed = await self.sessions.replay(turns, chat, exchange, request.is_disconnected)
                if replayed is not None:
                    return replayed
                exchange = await self._run(begin(False))  # that attempt went no further: this one is the turn
                assert isinstance(exchange, Exchange)
            begun.append(exchange)
            request.state.lines = exchange.calls.lines
            gone = request.is_disconnected
            return await (
                self.sessions.stream(turns, chat, upstream, exchange, gone=gone)
                if chat.stream
                else self.sessions.complete(turns, chat, upstream, exchange, gone=gone)
            )
        finally:
            handled = True

    # --- passthrough ----------------------------------------------------------------------------

    async def _passthrough(self, turns: Turns, chat: Request, upstream: str, lines: list[dict[str, Any]]) -> Response:
        started = time.perf_counter()
        try:
            response = await llm.acomplete(upstream, chat.messages, chat.tools, **chat.options)
        except LLMError as exc:
            lines.append(turns.passthrough(chat.messages, chat.tools, {}, None, model=upstream,
                                           latency=time.perf_counter() - started))  # fmt: skip
            return provider_error(exc)
        lines.append(turns.passthrough(chat.messages, chat.tools, llm.message_of(response), response, model=upstream,
                                       latency=time.perf_counter() - started))  # fmt: skip
        return JSONResponse(dumped(response, chat.model))

    async def _passthrough_stream(self, turns: Turns, chat: Request, upstream: str, lines: list[dict[str, Any]]) -> Response:
        started = time.perf_counter()
        chunks = llm.astream(upstream, chat.messages, chat.tools, **chat.options)
        try:
            first = await anext(chunks)
        except LLMError as exc:
            lines.append(turns.passthrough(chat.messages, chat.tools, {}, None, model=upstream,
                                           latency=time.perf_counter() - started))  # fmt: skip
            return provider_error(exc)

        async def events() -> AsyncIterator[bytes]:
            streamed, chunk = llm.StreamedMessage(), first
            try:
                while chunk is not None:
                    streamed.add(chunk)
                    # The usage is asked for upstream for the usage log; the client gets it only if it asked too.
                    data = dumped(chunk, chat.model, usage=chat.include_usage)
                    if data.get("choices") or chat.include_usage:
                        yield sse(data)
                    chunk = await anext(chunks, None)
            except LLMError as exc:
                yield sse(error_body(llm.status_of(exc), redact_secrets(str(exc))[:1000], code="upstream_error"))
            finally:
                lines.append(turns.passthrough(chat.messages, chat.tools, streamed.message(), streamed.usage, model=upstream,
                                               latency=time.perf_counter() - started))  # fmt: skip
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")


def create_app(config: Config, *, store: AsyncSessionStore | None = None) -> Starlette:
    """The endpoint's ASGI app for ``config`` (its store, unless ``store`` is given)."""
    return Endpoint(config, store=store).app


def app_from_environment() -> Starlette:
    """The app for ``$MIDDLEWARE_CONFIG`` and ``$REDIS_URL``: what each worker process of
    ``middleware serve --workers N`` builds (uvicorn imports it by name)."""
    from ..config.files import load_config, with_command_log
    from .server import log_to_stderr

    log_to_stderr()
    return create_app(with_command_log(load_config()))
