"""A LiteLLM proxy hook (``pip install "token-middleware[litellm-proxy]"``): the proxy's
clients get the same memory as ``middleware serve`` gives, added by config::

    # the proxy's config.yaml
    litellm_settings:
      callbacks: middleware.adapters.litellm_proxy.hook

Before each call (``async_pre_call_hook``) the request's messages are replaced by the
session's composed prompt and the turn's tool loop; after it (``async_log_success_event``)
the turn is recorded, or kept open for the client's tool results, exactly as the endpoint
does (``middleware.serve.turns``). A request the proxy rejects after that hook (a guardrail,
a rate limit: ``async_post_call_failure_hook``) gives its turn's place in the session up at
once; one the proxy never finishes for the hook (a client gone mid-stream) is let go after
``OPEN_SECONDS`` (or ``serve.order_wait_seconds``, if longer), or when ``MAX_OPEN`` newer
ones push it out, so the session's later turns never wait on it longer.

The proxy makes the call itself, so the hook cannot answer the disclosure loader: the
client's tools go upstream as it sent them. The session is the request's ``user``, else
``metadata.session_id``, else the ``X-Session-Id`` header; other requests pass untouched.
Sessions belong to the proxy key's team, else to the key itself: a key of another team
never reaches them, whatever session id it names.
``hook`` is made on first use from ``$MIDDLEWARE_CONFIG`` and ``$REDIS_URL``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import llm
from ..config.files import load_config
from ..config.schema import Config
from ..config.service import DIGESTED, TENANT, tenant_name
from ..core.text import JSON_DEPTH, json_depth
from ..events import log
from ..exceptions import InvalidInputError, StoreError, require
from ..lru import Lru
from ..runner import arun
from ..serve.session import SessionRequests
from ..serve.turns import Exchange, Turns
from ..session.engine import Engine
from ..store.drivers import AsyncRedisStore, AsyncSessionStore
from ..store.live import LEASE_SECONDS
from ..turn.plan import Request

__all__ = ["MiddlewareHook", "hook"]  # noqa: F822 (hook is made on first use, by __getattr__)

require("litellm.proxy", "litellm-proxy", '"litellm[proxy]"')

# How long, in seconds, a request's turn is kept for the callback that ends it (success or
# failure) at least; ``serve.order_wait_seconds`` (plus a lease) if longer. Past it the proxy
# is taken to have dropped the request without telling the hook (a client gone mid-stream):
# the turn is let go, its lease no longer renewed and its place given up; a call ending
# later still answers its client, but its turn is not recorded.
OPEN_SECONDS = 600.0
# At most this many turns kept open at once in one process; past it the oldest is let go alike.
MAX_OPEN = 10_000


@dataclass(eq=False)
class _Open:
    """A request's turn, from the pre-call hook to the callback that ends it: the turns, the
    exchange, the request sent and when, the task renewing the lease on the turn's place
    meanwhile, and the timer that lets it go if no callback ever comes."""

    turns: Turns
    exchange: Exchange
    request: Request
    started: float
    lease: asyncio.Task[None]
    expiry: asyncio.TimerHandle | None = None

    def close(self) -> None:
        """Stop renewing the lease and forget the timer (the caller settles the turn)."""
        self.lease.cancel()
        if self.expiry is not None:
            self.expiry.cancel()


def session_of(data: Mapping[str, Any]) -> str | None:
    """The session a proxied request names, if any."""
    metadata = data.get("metadata") or data.get("litellm_metadata") or {}
    request = data.get("proxy_server_request") or {}
    headers = {str(k).lower(): v for k, v in {**(metadata.get("headers") or {}), **(request.get("headers") or {})}.items()}
    for found in (data.get("user"), metadata.get("session_id"), headers.get("x-session-id")):
        if isinstance(found, str) and found:
            return found
    return None


def tenant_of(key: Any) -> str | None:
    """The tenant of a proxied request: its key's team, else the key (by a digest, never
    the key itself); None when the proxy knows no key (it checks none and none was sent)."""
    team = getattr(key, "team_id", None)
    if isinstance(team, str) and team:
        literal = f"team-{team}"  # a team id of the digested form is digested too, so no team takes another's digest
        return literal if TENANT.fullmatch(literal) and not DIGESTED.fullmatch(literal) else tenant_name(team, "team")
    token = getattr(key, "token", None) or getattr(key, "api_key", None)
    return tenant_name(token) if isinstance(token, str) and token else None


class MiddlewareHook(llm.custom_logger_class()):  # type: ignore[misc]
    """The middleware as a LiteLLM callback: composes before the call, records after it."""

    def __init__(self, config: Config | None = None, *, store: AsyncSessionStore | None = None) -> None:
        super().__init__()
        self.config = config if config is not None else load_config()
        self.engine = Engine(self.config)
        self.store = store if store is not None else AsyncRedisStore.from_url(self.config.store.url, self.config.store)
        self._tenants: Lru[Turns] = Lru(1_024)  # the turns of each tenant seen lately
        # By litellm call id, from the hook to the callback that ends the turn (see _Open).
        self._exchanges: Lru[_Open] = Lru(MAX_OPEN, evicted=self._let_go)  # one pushed out is let go
        self._requests = SessionRequests(lambda program: arun(program, self.store.send))

    def turns_of(self, tenant: str | None) -> Turns:
        """The turns of ``tenant``'s sessions: its own engine over its own key prefix, sharing the usage log."""
        turns = self._tenants.get(str(tenant))
        if turns is None:
            turns = Turns.of_tenant(self.engine, self.config, tenant, kind="litellm_proxy")
            self._tenants.put(str(tenant), turns)
        return turns

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: Any
    ) -> dict[str, Any]:
        session = session_of(data)
        if session is None or str(call_type) not in {
            "completion",
            "acompletion",
            "CallTypes.completion",
            "CallTypes.acompletion",
        }:
            return data
        for field in ("messages", "tools"):  # checked before the call, as the endpoint checks its requests
            if json_depth(data.get(field), JSON_DEPTH - 1) > JSON_DEPTH - 1:
                raise ValueError(f"'{field}' nests deeper than {JSON_DEPTH} levels; expected flatter JSON.")
        turns = self.turns_of(tenant_of(user_api_key_dict))
        try:
            begun = turns.begin(session, data.get("messages"), data.get("tools"), str(data.get("model")), disclose=False)
            exchange = await arun(begun, self.store.send)
            assert isinstance(exchange, Exchange)  # no key given: never a retry
        except InvalidInputError as exc:  # the proxy answers 400 with this message
            raise ValueError(str(exc)) from None
        request = exchange.calls.request()
        call_id = str(data.setdefault("litellm_call_id", str(uuid.uuid4())))
        found = _Open(turns, exchange, request, time.perf_counter(), self._requests.lease(turns, exchange))
        keep = max(OPEN_SECONDS, turns.wait + LEASE_SECONDS)
        found.expiry = asyncio.get_running_loop().call_later(keep, self._expire, call_id, found)
        self._exchanges.put(call_id, found)
        data["messages"] = request.messages
        if request.schemas is not None:  # the client's own, with their breakpoint where the caching rules place one
            data["tools"] = request.schemas
        return data

    async def async_post_call_success_hook(self, data: dict[str, Any], user_api_key_dict: Any, response: Any) -> Any:
        # Runs before the proxy answers: the client's next request finds the turn recorded.
        await self._finish(data, response)
        return response

    async def async_log_success_event(self, kwargs: dict[str, Any], response_obj: Any, start_time: Any, end_time: Any) -> None:
        # Streams end here (after the proxy answered); a call finished above is not found again.
        await self._finish(kwargs, response_obj)

    async def async_post_call_failure_hook(
        self,
        request_data: dict[str, Any],
        original_exception: Exception,
        user_api_key_dict: Any,
        traceback_str: str | None = None,
    ) -> None:
        # The proxy answers with an error after our pre-call hook: a guardrail or a rate limit
        # rejected the request (no success or failure event may follow), or the call failed.
        # The turn gives its place up before the client hears, so its next request is not held
        # behind it; a failure event still to come records the failed call's usage.
        found = self._exchanges.get(str(request_data.get("litellm_call_id")))
        if found is None:
            return
        found.lease.cancel()
        try:
            await self._requests.run(found.turns.pay(found.exchange))
        except StoreError:  # given up beside the request while the store is back within HOLD_SECONDS
            self._requests.pay(found.turns, found.exchange)
        else:
            self._requests.follow(found.turns, found.exchange)  # a turn whose client-side tools ran is recorded
        status = getattr(original_exception, "status_code", None)
        log.warning("litellm_proxy.call_rejected", session=found.exchange.session_id,
                    status=status if isinstance(status, int) else None)  # fmt: skip

    def _expire(self, call_id: str, found: _Open) -> None:
        """No callback ended the turn in time: let it go."""
        if self._exchanges.get(call_id) is found:
            self._exchanges.pop(call_id)
            self._let_go(found)

    def _let_go(self, found: _Open) -> None:
        """A turn no callback will end: its lease no longer renewed, its place given up."""
        found.close()
        if found.exchange.owed is not False:  # not given up already (a rejected request's, kept for its failure event)
            log.warning("litellm_proxy.turn_abandoned", session=found.exchange.session_id)
        self._requests.pay(found.turns, found.exchange)

    async def _finish(self, data: Mapping[str, Any], response: Any) -> None:
        found = self._exchanges.pop(str(data.get("litellm_call_id")))
        if found is None:
            return
        found.close()
        turns, exchange, request, started = found.turns, found.exchange, found.request, found.started
        if not getattr(response, "choices", None):  # nothing to record: the turn gives its place up
            self._requests.pay(turns, exchange)
            return
        model = str(data.get("model") or "")
        step = turns.step(exchange, request, llm.message_of(response), response, model=model,
                          latency=time.perf_counter() - started)  # fmt: skip
        try:
            await arun(step, self.store.send)
        finally:
            self._requests.pay(turns, exchange)  # a turn the store could not take is held; an unplaced one gives its place up

    async def async_log_failure_event(self, kwargs: dict[str, Any], response_obj: Any, start_time: Any, end_time: Any) -> None:
        found = self._exchanges.pop(str(kwargs.get("litellm_call_id")))
        if found is None:
            return
        found.close()
        turns, exchange, request, started = found.turns, found.exchange, found.request, found.started
        error = kwargs.get("exception")
        status = llm.status_of(error) if isinstance(error, BaseException) else 502
        failed = turns.fail(exchange, request, model=str(kwargs.get("model") or ""), latency=time.perf_counter() - started,
                                 status=status)  # fmt: skip
        try:
            await arun(failed, self.store.send)
        finally:
            self._requests.pay(turns, exchange)
        log.warning("litellm_proxy.call_failed", session=exchange.session_id, status=status)


_hook: list[MiddlewareHook] = []


def __getattr__(name: str) -> Any:
    # ``hook`` is made on first use, so importing this module reads no config.
    if name == "hook":
        if not _hook:
            _hook.append(MiddlewareHook())
        return _hook[0]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
