"""A LiteLLM proxy hook (``pip install "token-middleware[litellm-proxy]"``): the proxy's
clients get the same memory as ``middleware serve`` gives, added by config::

    # the proxy's config.yaml
    litellm_settings:
      callbacks: middleware.adapters.litellm_proxy.hook

Before each call (``async_pre_call_hook``) the request's messages are replaced by the
session's composed prompt and the turn's tool loop; after it (``async_log_success_event``)
the turn is recorded, or kept open for the client's tool results, exactly as the endpoint
does (``middleware.serve.turns``). The proxy makes the call itself, so the hook cannot answer
the disclosure loader: the client's tools go upstream as it sent them. The session is the request's ``user``, else
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
from typing import Any

from .. import llm
from ..config.files import load_config
from ..config.schema import Config
from ..config.service import TENANT, tenant_name
from ..core.text import JSON_DEPTH, json_depth
from ..events import log
from ..exceptions import InvalidInputError, require
from ..lru import Lru
from ..runner import arun
from ..serve.session import SessionRequests
from ..serve.turns import Exchange, Turns
from ..session.engine import Engine
from ..store.drivers import AsyncRedisStore, AsyncSessionStore
from ..turn.plan import Request

__all__ = ["MiddlewareHook", "hook"]  # noqa: F822 (hook is made on first use, by __getattr__)

require("litellm.proxy", "litellm-proxy", '"litellm[proxy]"')


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
        return f"team-{team}" if TENANT.match(f"team-{team}") else tenant_name(team, "team")
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
        # By litellm call id, from the hook to the callback: the turns, the exchange, the request
        # sent, when, and the task renewing the lease on the turn's place meanwhile.
        self._exchanges: Lru[tuple[Turns, Exchange, Request, float, asyncio.Task[None]]] = Lru(10_000)
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
        except InvalidInputError as exc:  # the proxy answers 400 with this message
            raise ValueError(str(exc)) from None
        request = exchange.calls.request()
        call_id = data.setdefault("litellm_call_id", str(uuid.uuid4()))
        self._exchanges.put(call_id, (turns, exchange, request, time.perf_counter(), self._requests.lease(turns, exchange)))
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

    async def _finish(self, data: Mapping[str, Any], response: Any) -> None:
        found = self._exchanges.pop(str(data.get("litellm_call_id")))
        if found is None:
            return
        turns, exchange, request, started, lease = found
        lease.cancel()
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
        turns, exchange, request, started, lease = found
        lease.cancel()
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
