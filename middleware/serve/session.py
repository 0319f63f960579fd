"""A request that names a session, over HTTP: the upstream calls of its turn, made until the
turn waits for the client's tool results or ends, answered as one OpenAI reply (plain) or
one stream of events (streamed). The turn itself is ``middleware.serve.turns``.

Calls the turn answers itself (the loader) never reach the client: a reply is the model's
last one, with only the tool calls the client runs, and usage summed over the request's
calls. A stream forwards the model's text as it comes and sends the client's tool calls,
the finish reason and the usage (summed over its calls) at its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import orjson
from starlette.background import BackgroundTask
from starlette.responses import JSONResponse, Response, StreamingResponse

from .. import llm
from ..core.effects import Program
from ..core.text import redact_secrets
from ..events import log
from ..exceptions import LLMError, StoreError
from ..store.live import LEASE_SECONDS
from ..store.retries import ALIVE_SECONDS, DELIVERED, GAVE_UP
from ..turn.plan import Request
from .turns import Exchange, Retried, Turns, client_calls
from .wire import Request as ChatRequest
from .wire import error_body, sse

__all__ = ["SessionRequests", "UpstreamError", "dumped", "provider_error"]

_USAGE_FIELDS = ("prompt_tokens", "completion_tokens", "total_tokens")
# How long a turn the model answered is held while the store cannot take it, in seconds.
HOLD_SECONDS = 600.0
HELD = "store unavailable: the turn is held and written when the store is back"


def dumped(response: Any, model: str, *, usage: bool = True) -> dict[str, Any]:
    """A litellm response or chunk as OpenAI's JSON, named by the model the client asked for
    (``usage`` False: without its usage, which a stream sends only when asked)."""
    data: dict[str, Any] = response.model_dump(exclude_none=True)
    if not usage:
        data.pop("usage", None)
    data["model"] = model
    for choice in data.get("choices") or ():
        if "message" in choice:  # OpenAI sends "content": null beside tool calls; strict clients expect the key
            choice["message"].setdefault("content", None)
    return data


class UpstreamError(JSONResponse):
    """The upstream provider's failure, in OpenAI's error shape."""


# What a provider says when the key it was given (from this server's environment) is missing or wrong.
_CREDENTIALS = re.compile(r"(?i)missing credentials|api[_ ]?key|authenticat|unauthori[sz]ed|permission denied")


def provider_error(error: LLMError) -> UpstreamError:
    """The client's answer to a failed upstream call: the provider's status and message. A
    provider that refused this server's own credentials says so (``upstream_auth_error``),
    with its 401 or 403, or a 502 for one that reported it as a server error, which the
    client should not retry: ``x-should-retry: false``, which OpenAI's SDKs obey."""
    status, message = llm.status_of(error), redact_secrets(str(error))[:1000]
    if status in (401, 403) or (status >= 500 and _CREDENTIALS.search(message)):
        status = status if status < 500 else 502
        hint = ("The upstream provider refused this server's credentials: set its API key in the environment "
                f"of middleware serve. ({message})")  # fmt: skip
        return UpstreamError(error_body(status, hint[:1200], code="upstream_auth_error"), status_code=status,
                             headers={"x-should-retry": "false"})  # fmt: skip
    return UpstreamError(error_body(status, message, code="upstream_error"), status_code=status)


class _Usage:
    """Usage summed over a request's upstream calls."""

    def __init__(self) -> None:
        self.counts = dict.fromkeys(_USAGE_FIELDS, 0)
        self.calls = 0

    def add(self, usage: Any) -> None:
        reported = llm.usage_of(usage)
        self.calls += 1
        for name in ("prompt_tokens", "completion_tokens"):
            self.counts[name] += reported.get(name) or 0
        self.counts["total_tokens"] = self.counts["prompt_tokens"] + self.counts["completion_tokens"]


class SessionRequests:
    """Runs a session's request: ``run`` performs a program on the store; programs that
    write (a step, a settlement) run to their end even when the client goes away."""

    def __init__(self, run: Callable[[Program[Any]], Awaitable[Any]]) -> None:
        self.run = run
        self.tasks: set[asyncio.Task[Any]] = set()  # store writes that outlive their request
        self.closing = False  # the server is stopping: held turns are tried once more, not again

    def start(self, program: Awaitable[Any] | Program[Any]) -> asyncio.Task[Any]:
        """``program`` (or a coroutine) run to its end beside the request that asked for it,
        whatever happens to that request (a client gone away cancels it)."""
        task = asyncio.ensure_future(program if isinstance(program, Awaitable) else self.run(program))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def _kept(self, program: Program[Any]) -> Any:
        """``program``'s result, the program run to its end even if this request is cancelled."""
        return await asyncio.shield(self.start(program))

    def lease(self, turns: Turns, exchange: Exchange) -> asyncio.Task[None]:
        """Renew the lease on the turn's place while the request runs (cancel the task when it ends)."""

        async def renewing() -> None:
            until = time.monotonic() + turns.wait  # past it, later turns no longer wait anyway
            with contextlib.suppress(StoreError):  # a store that failed fails the request too
                while time.monotonic() < until:
                    await asyncio.sleep(LEASE_SECONDS / 4)
                    if not await self.run(turns.renew(exchange)):
                        return

        return asyncio.ensure_future(renewing())

    def pay(self, turns: Turns, exchange: Exchange) -> None:
        """Write what the turn still owes its session (see ``Turns.pay``) beside the request,
        again and again while the store fails, for HOLD_SECONDS at most: the turn the model
        answered (and was paid for) is held, not lost, through a short outage. A turn written
        but queued behind an earlier one is then followed until it is applied (``follow``)."""
        if exchange.owed is False:
            self.follow(turns, exchange)
            return

        async def paying() -> None:
            delay, deadline = 0.1, time.monotonic() + HOLD_SECONDS
            while True:
                try:
                    await self.run(turns.pay(exchange))
                    self.follow(turns, exchange)
                    return
                except StoreError as exc:
                    if time.monotonic() + delay > deadline or self.closing:
                        log.error("serve.turn_not_recorded", session=exchange.session_id, error=redact_secrets(str(exc)))
                        exchange.owed = False  # given up: nothing more will be written
                        return
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

        self.start(paying())

    def follow(self, turns: Turns, exchange: Exchange) -> None:
        """A turn written but queued behind an earlier one that holds the line (a request still
        running, or one whose process died): flush the session beside the request until it is
        applied, so it reaches the session's memory without waiting for its next request. The
        turn ahead holds the line while its request renews its lease, ``turns.wait`` at most,
        and ``LEASE_SECONDS`` once its request is gone; with several ahead, each holds it in
        turn, so the follower goes on while the line moves."""
        if not exchange.queued:
            return
        exchange.queued = False  # one follower per turn

        async def following() -> None:
            patience, moved = turns.wait + LEASE_SECONDS, -1
            deadline = time.monotonic() + patience
            with contextlib.suppress(StoreError):  # the session's next request flushes it then
                while True:
                    if not self.closing:
                        await asyncio.sleep(LEASE_SECONDS / 4)
                    last = self.closing or time.monotonic() > deadline
                    done, applied = await self.run(turns.catch_up(exchange))
                    if done or last:
                        return
                    if applied > moved:  # the line moved: the next turn ahead may hold it as long
                        moved, deadline = applied, time.monotonic() + patience

        self.start(following())

    # --- a retry ----------------------------------------------------------------------------

    def heartbeat(self, turns: Turns, session_id: str, nonce: str, settled: Callable[[], bool]) -> None:
        """Say every half second that request ``nonce`` still runs, until it is ``settled``
        (its answer kept, or nothing left to keep; a turn held through an outage is settled
        when it is written or given up), through the server's shutdown too, which waits for
        it: a retry of it, to any process, waits while it does (``middleware.store.retries``)."""

        async def beating() -> None:
            while True:
                await asyncio.sleep(ALIVE_SECONDS / 4)
                if settled():
                    return
                try:
                    await self.run(turns.beat(session_id, nonce))
                except StoreError:
                    continue  # the store is out: nothing to say it to
                except Exception:  # the session id was refused: no request to keep alive
                    return

        self.start(beating())

    async def delivery(
        self, turns: Turns, session_id: str, slot: int, nonce: str, gone: Callable[[], Awaitable[bool]] | None
    ) -> Callable[[], Awaitable[None]] | None:
        """Asked as an answer is about to be sent (once it is, the server reads any client as
        gone): when its client is still there to take it, what then marks the answer kept in
        ``slot`` for a retry ``DELIVERED`` (a request sent again with its body is a new
        message; see ``middleware.store.retries``); None when it is gone, or nothing is kept."""
        if slot < 0 or gone is None or await gone():
            return None

        async def delivered() -> None:
            with contextlib.suppress(StoreError):
                await self.run(turns.delivered(session_id, slot, nonce))

        return delivered

    async def replay(
        self, turns: Turns, chat: ChatRequest, retried: Retried, gone: Callable[[], Awaitable[bool]] | None = None
    ) -> Response | None:
        """The answer of the earlier attempt ``retried`` retries, once it has one, as this
        request asks for it (plain or streamed); None when that attempt went no further (the
        request then runs as a new turn); a 409 when it is still running after
        ``serve.order_wait_seconds`` (OpenAI's SDKs try again). A replay taken by its client
        is delivered (``delivery``), unless it carries an idempotency key."""
        deadline = time.monotonic() + turns.wait
        while True:
            answer = await self.run(turns.answer_of(retried))
            if answer in (GAVE_UP, DELIVERED):
                return None
            if answer is not None:
                slot = -1 if chat.keyed else retried.retry.slot
                after = await self.delivery(turns, retried.session_id, slot, retried.retry.nonce, gone)
                return _replayed(chat, orjson.loads(answer), after)
            if time.monotonic() >= deadline:
                message = (f"An earlier attempt of this request is still running after {turns.wait:g} s "
                           "(serve.order_wait_seconds); try again later.")  # fmt: skip
                return JSONResponse(error_body(409, message, code="request_in_progress"), status_code=409,
                                    headers={"retry-after": "1"})  # fmt: skip
            await asyncio.sleep(REPLAY_POLL_SECONDS)

    # --- plain ------------------------------------------------------------------------------

    async def complete(
        self, turns: Turns, chat: ChatRequest, upstream: str, exchange: Exchange,
        gone: Callable[[], Awaitable[bool]] | None = None,
    ) -> Response:  # fmt: skip
        """``chat``'s turn (begun by ``turns``), answered as one reply; ``gone``: whether the
        client left (its answer is then kept whole for its retry)."""
        usage, lease = _Usage(), self.lease(turns, exchange)
        try:
            while True:
                request, started = exchange.calls.request(), time.perf_counter()
                try:
                    response = await llm.acomplete(upstream, request.messages, request.schemas, **chat.options)
                except LLMError as exc:
                    await self._kept(turns.fail(exchange, request, model=upstream, latency=time.perf_counter() - started,
                                                status=llm.status_of(exc)))  # fmt: skip
                    return provider_error(exc)
                reply = llm.message_of(response)
                usage.add(response)
                latency = time.perf_counter() - started
                head = {"id": response.id, "created": response.created, "usage": dict(usage.counts),
                        "finish_reason": response.choices[0].finish_reason if response.choices else None}  # fmt: skip
                try:
                    step = await self._kept(turns.step(exchange, request, reply, response, model=upstream, latency=latency,
                                                       head=head))  # fmt: skip
                except StoreError as exc:
                    if exchange.owed is True:  # nothing of the turn is ready to write: the request fails
                        raise
                    log.error("serve.turn_held", session=exchange.session_id, error=redact_secrets(str(exc)))
                    body = self._answer(dumped(response, chat.model), reply, exchange, usage)
                    after = await self._sent(turns, exchange, gone)
                    return JSONResponse(body, headers={"X-Middleware-Warning": HELD}, background=after)
                if step != "again":
                    body = self._answer(dumped(response, chat.model), reply, exchange, usage)
                    return JSONResponse(body, background=await self._sent(turns, exchange, gone))
        finally:
            lease.cancel()
            self.pay(turns, exchange)  # whatever the request left undone (an error, a client gone, a held turn)

    async def _sent(self, turns: Turns, exchange: Exchange, gone: Callable[[], Awaitable[bool]] | None) -> BackgroundTask | None:
        """What runs once the turn's answer was sent (see ``delivery``): nothing for a request
        with an idempotency key, whose answer is kept whole for it."""
        slot = -1 if exchange.keyed or exchange.answer is None or exchange.answer.text == GAVE_UP else exchange.slot
        after = await self.delivery(turns, exchange.session_id, slot, exchange.nonce, gone)
        return BackgroundTask(after) if after else None

    @staticmethod
    def _answer(body: dict[str, Any], reply: Mapping[str, Any], exchange: Exchange, usage: _Usage) -> dict[str, Any]:
        """The client's reply: the model's last, with the calls the client runs only (or, for
        a turn stopped after too many rounds, its final text), and the request's usage."""
        choice = body["choices"][0]
        message = choice["message"]
        if exchange.forwarded:
            message["tool_calls"] = client_calls(reply, exchange.forwarded)
        elif reply.get("tool_calls"):  # the turn ended on calls it would not run (too many rounds)
            message.pop("tool_calls", None)
            message["content"] = exchange.final
            choice["finish_reason"] = "stop"
        if usage.calls > 1:
            body["usage"] = dict(usage.counts)
        return body

    # --- streamed ---------------------------------------------------------------------------

    async def stream(
        self, turns: Turns, chat: ChatRequest, upstream: str, exchange: Exchange,
        gone: Callable[[], Awaitable[bool]] | None = None,
    ) -> Response:  # fmt: skip
        """``chat``'s turn (begun by ``turns``), answered as one stream of events. A client
        ``gone`` before the model's first chunk came (it timed out waiting) did not stop the
        model, as one that leaves mid-stream may mean to: the stream runs to its end beside
        the request, its turn recorded whole and its answer kept for the client's retry."""
        request, started = exchange.calls.request(), time.perf_counter()
        lease = self.lease(turns, exchange)
        try:
            chunks = llm.astream(upstream, request.messages, request.schemas, **chat.options)
            first = await anext(chunks)  # a provider error before any event keeps its HTTP status
        except LLMError as exc:
            lease.cancel()
            await self._kept(turns.fail(exchange, request, model=upstream, latency=time.perf_counter() - started,
                                        status=llm.status_of(exc)))  # fmt: skip
            return provider_error(exc)
        except BaseException:
            lease.cancel()
            self.pay(turns, exchange)
            raise
        events = _Events(self, turns, chat, upstream, exchange, lease, gone)
        run = events.run(request, chunks, first, started)
        if gone is not None and await gone():

            async def unheard() -> None:
                async for _ in run:
                    pass

            self.start(unheard())
            return Response(status_code=499)  # nobody reads it
        return StreamingResponse(run, media_type="text/event-stream")


REPLAY_POLL_SECONDS = 0.1  # how often a retry looks for its earlier attempt's answer
REPLAYED = "the answer of an earlier attempt of this request (a retry): the model was not called again"


def _replayed(chat: ChatRequest, kept: Mapping[str, Any], after: Callable[[], Awaitable[None]] | None) -> Response:
    """A kept answer (see ``Turns._answer``) as ``chat`` asks for it: one reply, or a stream;
    ``after`` runs once it was sent."""
    head = {"id": kept.get("id") or "chatcmpl-middleware", "created": kept.get("created") or int(time.time()),
            "model": chat.model}  # fmt: skip
    message, finish = dict(kept["message"]), kept.get("finish_reason") or "stop"
    usage = kept.get("usage") or dict.fromkeys(_USAGE_FIELDS, 0)
    headers = {"X-Middleware-Replayed": REPLAYED}
    if not chat.stream:
        message.setdefault("content", None)
        body = {**head, "object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage}  # fmt: skip
        return JSONResponse(body, headers=headers, background=BackgroundTask(after) if after else None)
    chunk = {**head, "object": "chat.completion.chunk"}
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    events = [{**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}]
    calls = message.get("tool_calls") or ()
    if calls:
        deltas = [{"index": i, "id": c["id"], "type": "function", "function": c["function"]} for i, c in enumerate(calls)]
        events.append({**chunk, "choices": [{"index": 0, "delta": {"tool_calls": deltas}, "finish_reason": None}]})
    events.append({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if chat.include_usage:
        events.append({**chunk, "choices": [], "usage": usage})

    async def stream() -> AsyncIterator[bytes]:
        for event in events:
            yield sse(event)
        yield b"data: [DONE]\n\n"
        if after is not None:
            await after()

    return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)


class _Events:
    """The events of one streamed request (see the module docstring)."""

    def __init__(
        self,
        owner: SessionRequests,
        turns: Turns,
        chat: ChatRequest,
        upstream: str,
        exchange: Exchange,
        lease: asyncio.Task[None],
        gone: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        self.owner, self.turns, self.chat, self.upstream, self.exchange = owner, turns, chat, upstream, exchange
        self.lease = lease  # renews the turn's place while the stream runs
        self.gone = gone  # whether the client left (see SessionRequests.stream)
        self.head: dict[str, Any] = {}  # the id and creation time every event carries (the first chunk's)
        self.usage = _Usage()
        self.finish: str | None = None  # the model's last finish reason

    async def run(self, request: Request, chunks: AsyncIterator[Any], chunk: Any, started: float) -> AsyncIterator[bytes]:
        owner, exchange, step = self.owner, self.exchange, None
        streamed = llm.StreamedMessage()
        try:
            while True:
                while chunk is not None:
                    streamed.add(chunk)
                    forwarded = self._text_event(chunk)
                    if forwarded is not None:
                        yield sse(forwarded)
                    chunk = await anext(chunks, None)
                self.usage.add(streamed.usage)
                reply = streamed.message()
                head = {**self.head, "finish_reason": self.finish, "usage": dict(self.usage.counts)}
                step = owner.start(self.turns.step(exchange, request, reply, streamed.usage, model=self.upstream,
                                                    latency=time.perf_counter() - started, head=head))  # fmt: skip
                try:
                    again = await asyncio.shield(step) == "again"
                except StoreError as exc:
                    if exchange.owed is True:  # nothing of the turn is ready to write: the request fails
                        raise
                    log.error("serve.turn_held", session=exchange.session_id, error=redact_secrets(str(exc)))
                    again = False  # the model's answer still reaches the client; the turn is held (see _settle)
                if not again:
                    for event in self._end(reply):
                        yield sse(event)
                    break
                request, started, streamed, step = exchange.calls.request(), time.perf_counter(), llm.StreamedMessage(), None
                chunks = llm.astream(self.upstream, request.messages, request.schemas, **self.chat.options)
                chunk = await anext(chunks, None)
        except LLMError as exc:  # headers are sent: the error becomes the last event
            yield sse(error_body(llm.status_of(exc), redact_secrets(str(exc))[:1000], code="upstream_error"))
        except StoreError as exc:
            log.error("serve.turn_not_recorded", session=exchange.session_id, error=redact_secrets(str(exc)))
            yield sse(error_body(503, "The session store is unavailable; try again.", code="store_unavailable"))
        finally:
            # The client went away, or the provider broke off: what was said is recorded, once
            # the step under way (if any) says the turn did not end with it.
            self.lease.cancel()
            owner.start(self._settle(step, request, streamed.message(), streamed.usage, time.perf_counter() - started))
        slot = -1 if exchange.keyed or exchange.answer is None or exchange.answer.text == GAVE_UP else exchange.slot
        after = await owner.delivery(self.turns, exchange.session_id, slot, exchange.nonce, self.gone)
        yield b"data: [DONE]\n\n"
        if after is not None:
            await after()

    async def _settle(
        self, step: asyncio.Task[Any] | None, request: Request, reply: dict[str, Any], usage: Any, latency: float
    ) -> None:
        if step is not None:
            try:
                if await step != "again":
                    self.owner.follow(self.turns, self.exchange)
                    return
            except Exception:  # the step failed: its turn is held, or its place given up
                self.owner.pay(self.turns, self.exchange)
                return
        settle = self.turns.settle(self.exchange, request, reply, usage, model=self.upstream, latency=latency)
        try:
            await self.owner.run(settle)
            self.owner.follow(self.turns, self.exchange)
        except Exception:  # the store failed (the turn is held), or the turn could not be recorded (its place is given up)
            self.owner.pay(self.turns, self.exchange)

    def _event(self, choice: dict[str, Any]) -> dict[str, Any]:
        return {**self.head, "object": "chat.completion.chunk", "model": self.chat.model, "choices": [choice]}

    def _text_event(self, chunk: Any) -> dict[str, Any] | None:
        """A chunk as the client gets it: its text (and role), without the tool calls, the
        finish reason and the usage, which the stream sends at its end."""
        data = chunk.model_dump(exclude_none=True)
        if not self.head:
            self.head = {"id": data.get("id", "chatcmpl-middleware"), "created": data.get("created", int(time.time()))}
        choices = []
        for choice in data.get("choices") or ():
            self.finish = choice.get("finish_reason") or self.finish
            delta = {key: value for key, value in (choice.get("delta") or {}).items() if key in ("role", "content") and value}
            if delta:
                choices.append({"index": choice.get("index", 0), "delta": delta, "finish_reason": None})
        return self._event(choices[0]) if choices else None

    def _end(self, reply: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The stream's last events: the client's tool calls (or a stopped turn's final text),
        the finish reason, and the request's usage."""
        exchange, events = self.exchange, []
        calls = client_calls(reply, exchange.forwarded)
        if calls:
            deltas = [
                {"index": i, "id": call["id"], "type": "function", "function": call["function"]} for i, call in enumerate(calls)
            ]
            events.append(self._event({"index": 0, "delta": {"tool_calls": deltas}, "finish_reason": None}))
        elif reply.get("tool_calls") and exchange.final:  # the turn ended on calls it would not run (too many rounds)
            events.append(self._event({"index": 0, "delta": {"content": exchange.final}, "finish_reason": None}))
        kept = self.finish if self.finish in ("length", "content_filter") else None
        finish = "tool_calls" if calls else kept or "stop"
        events.append(self._event({"index": 0, "delta": {}, "finish_reason": finish}))
        if self.chat.include_usage:  # as OpenAI sends it when asked (stream_options.include_usage), last
            events.append({**self._event({}), "choices": [], "usage": dict(self.usage.counts)})
        return events
