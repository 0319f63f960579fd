"""What a manager is given to reach its store: an async manager used on one event loop
after another, and clients or stores of the wrong kind, refused at construction."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
import redis.asyncio

from middleware import AsyncSessionManager, Config, ConfigError, SessionManager, StoreError
from middleware.store import RedisStore


@pytest.fixture
def config(atlas: Config) -> Config:
    return atlas.with_overrides(usage_log={"path": None})


def test_an_async_manager_works_on_each_new_event_loop(config: Config, real_redis_url: str) -> None:
    """asyncio.run per call, one manager: every call works (each loop gets its own client,
    the last one's closed as its loop shut down) and each turn is stored once."""
    admin = redis.Redis.from_url(real_redis_url)
    before = {client["id"] for client in admin.client_list()}  # others' may close meanwhile: count the new ones
    mgr = AsyncSessionManager(config, redis_url=real_redis_url)
    for turn in range(1, 5):
        assert asyncio.run(mgr.record_turn("loops", user=f"goto shop {turn}", assistant="ok")) == turn
        assert asyncio.run(mgr.build_messages("loops", "goto home"))[-1]["content"] == "goto home"
    assert asyncio.run(mgr.get_state("loops")).turns == 4
    asyncio.run(mgr.close())
    assert {client["id"] for client in admin.client_list()} - before == set()  # no connection of the manager's left open
    admin.close()


def test_a_given_async_client_is_refused_on_another_loop_before_anything_is_sent(config: Config, real_redis_url: str) -> None:
    async def first() -> AsyncSessionManager:
        mgr = AsyncSessionManager(config, client=redis.asyncio.Redis.from_url(real_redis_url))
        await mgr.record_turn("given", user="goto shop", assistant="ok")
        return mgr

    mgr = asyncio.run(first())
    with pytest.raises(StoreError, match=r"another event loop.*Nothing was sent"):
        asyncio.run(mgr.record_turn("given", user="goto home", assistant="ok"))
    assert SessionManager(config, redis_url=real_redis_url).get_state("given").turns == 1


PASSWORD = "pw-not-to-show"


@pytest.mark.parametrize(
    ("face", "given", "said"),
    [
        ("sync", lambda url: {"client": redis.Redis.from_url(url, decode_responses=True)}, "decode_responses=True"),
        ("sync", lambda url: {"client": url}, "client is a str; SessionManager expects a redis-py client.*redis_url="),
        ("sync", lambda url: {"client": redis.asyncio.Redis.from_url(url)}, "redis.asyncio.client.Redis.*AsyncSessionManager"),
        ("async", lambda url: {"client": redis.Redis.from_url(url)}, "client is a redis.client.Redis; AsyncSessionManager"),
        ("sync", lambda url: {"store": object()}, "store is a object; SessionManager expects a SessionStore"),
        ("async", lambda url: {"store": RedisStore(redis.Redis.from_url(url))}, "store is a .*RedisStore.*ThreadedStore"),
        ("sync", lambda url: {"client": object()}, "client is a object.*store="),
    ],
)
def test_a_client_or_store_of_the_wrong_kind_is_refused_naming_its_type(
    config: Config, redis_server: Any, face: str, given: Any, said: str
) -> None:
    url = f"redis://:{PASSWORD}@127.0.0.1:{redis_server.port}/0"
    manager = SessionManager if face == "sync" else AsyncSessionManager
    with pytest.raises(ConfigError, match=said) as info:
        manager(config, **given(url))
    assert PASSWORD not in str(info.value) and len(str(info.value)) < 400


def test_a_given_client_is_named_in_errors_by_where_it_connects(config: Config) -> None:
    """Not by the configured store.url (memory:// by default) it does not use."""
    mgr = AsyncSessionManager(config, client=redis.asyncio.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5))
    with pytest.raises(StoreError, match=r"redis://127\.0\.0\.1:1/0") as info:
        asyncio.run(mgr.get_state("s"))
    assert "memory://" not in str(info.value)
