"""The LiteLLM proxy hook in-process, against a real Redis, called as the proxy calls it: a
request whose turn no success callback ends (rejected after the pre-call hook, or dropped)
must not hold its session's later turns."""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

pytest.importorskip("litellm.proxy.proxy_server")

import litellm
from fastapi import HTTPException

from middleware import Config, SessionManager
from middleware.adapters import litellm_proxy
from middleware.adapters.litellm_proxy import MiddlewareHook, tenant_of

pytestmark = pytest.mark.redis_server


def _run(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """An async test body, run on an event loop of its own (as the proxy runs the hook)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


def _key() -> Any:
    from litellm.proxy._types import UserAPIKeyAuth

    return UserAPIKeyAuth(api_key="sk-hook-tests")


def _data(session: str, text: str) -> dict[str, Any]:
    """A chat request as the proxy hands it to the hook (its call id already set)."""
    return {"model": "gpt-4o-mini", "user": session, "messages": [{"role": "user", "content": text}],
            "litellm_call_id": str(uuid.uuid4())}  # fmt: skip


def _reply(text: str) -> Any:
    return litellm.ModelResponse(choices=[{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}])


@pytest.fixture
def config(real_redis_url: str) -> Config:
    return Config().with_overrides(store={"url": real_redis_url}, usage_log={"path": None})


def _state(config: Config, session: str) -> tuple[int, list[str]]:
    """How many turns the session recorded, and its last messages."""
    with SessionManager(config.for_tenant(tenant_of(_key()))) as mgr:
        state = mgr.get_state(session)
        return state.turns, [str(m["content"]) for m in state.recent[-2:]]


async def _until(config: Config, session: str, turns: int, within: float) -> tuple[int, list[str]]:
    """The session's state once it recorded ``turns`` turns, or as it stands after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        state = await asyncio.to_thread(_state, config, session)
        if state[0] >= turns or time.monotonic() > deadline:
            return state
        await asyncio.sleep(0.1)


@_run
async def test_a_rejected_request_gives_its_place_up_at_once(config: Config) -> None:
    """A guardrail rejects request 1 after our pre-call hook: the proxy calls the failure hook
    only. Request 2 of the session is recorded at once, and request 3 is composed with it."""
    hook, session = MiddlewareHook(config), f"s-{uuid.uuid4().hex[:8]}"
    first, second = _data(session, "one"), _data(session, "two")
    await hook.async_pre_call_hook(_key(), None, first, "completion")
    await hook.async_pre_call_hook(_key(), None, second, "completion")
    rejected = HTTPException(status_code=400, detail="blocked by a guardrail")
    await hook.async_post_call_failure_hook(request_data=first, user_api_key_dict=_key(), original_exception=rejected,
                                            traceback_str=None)  # fmt: skip
    await hook.async_post_call_success_hook(second, _key(), _reply("answer two"))
    assert await _until(config, session, 1, within=1.5) == (1, ["two", "answer two"])
    third = _data(session, "three")
    await hook.async_pre_call_hook(_key(), None, third, "completion")
    assert "answer two" in str(third["messages"])
    await hook.async_post_call_success_hook(third, _key(), _reply("answer three"))
    assert await _until(config, session, 2, within=1.5) == (2, ["three", "answer three"])
    await hook.async_log_failure_event(
        {**first, "exception": rejected}, None, None, None
    )  # the proxy's own failure log: nothing left to do
    await asyncio.sleep(0)
    assert await asyncio.to_thread(_state, config, session) == (2, ["three", "answer three"])


@_run
async def test_concurrent_requests_are_still_recorded_in_arrival_order(config: Config) -> None:
    """The lease keeps its guarantee: request 2 finishing first waits for request 1."""
    hook, session = MiddlewareHook(config), f"s-{uuid.uuid4().hex[:8]}"
    first, second = _data(session, "one"), _data(session, "two")
    await hook.async_pre_call_hook(_key(), None, first, "completion")
    await hook.async_pre_call_hook(_key(), None, second, "completion")
    await hook.async_post_call_success_hook(second, _key(), _reply("answer two"))
    assert await _until(config, session, 1, within=1.0) == (0, [])  # held behind request 1, still in flight
    await hook.async_post_call_success_hook(first, _key(), _reply("answer one"))
    assert await _until(config, session, 2, within=3.0) == (2, ["two", "answer two"])  # turn 2 recorded last


@_run
async def test_a_request_never_finished_is_let_go(config: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    """No callback ever ends request 1 (its client went away): past the bound it is let go (its
    lease no longer renewed, forgotten by the hook), and the session's later turns are recorded."""
    monkeypatch.setattr(litellm_proxy, "OPEN_SECONDS", 0.5, raising=False)
    config = config.with_overrides(serve={"order_wait_seconds": 0.5})
    hook, session = MiddlewareHook(config), f"s-{uuid.uuid4().hex[:8]}"
    first = _data(session, "one")
    await hook.async_pre_call_hook(_key(), None, first, "completion")
    (lease,) = [t for t in asyncio.all_tasks() if "renewing" in repr(t.get_coro())]
    await asyncio.sleep(3.0)  # the bound: serve.order_wait_seconds and a lease
    assert hook._exchanges.get(first["litellm_call_id"]) is None
    assert lease.done()
    second = _data(session, "two")
    await hook.async_pre_call_hook(_key(), None, second, "completion")
    await hook.async_post_call_success_hook(second, _key(), _reply("answer two"))
    assert await _until(config, session, 1, within=1.0) == (1, ["two", "answer two"])


@_run
async def test_a_request_pushed_out_of_the_cache_is_let_go(config: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    """Newer requests push request 1 out of the hook's open turns: its lease task is cancelled
    and its place given up, so request 2 of its session is recorded at once."""
    monkeypatch.setattr(litellm_proxy, "MAX_OPEN", 1, raising=False)
    hook, session = MiddlewareHook(config), f"s-{uuid.uuid4().hex[:8]}"
    first, second = _data(session, "one"), _data(session, "two")
    await hook.async_pre_call_hook(_key(), None, first, "completion")
    (lease,) = [t for t in asyncio.all_tasks() if "renewing" in repr(t.get_coro())]
    await hook.async_pre_call_hook(_key(), None, second, "completion")
    await asyncio.sleep(0.1)
    assert lease.cancelled()
    await hook.async_post_call_success_hook(second, _key(), _reply("answer two"))
    assert await _until(config, session, 1, within=1.5) == (1, ["two", "answer two"])
