"""Every session operation on a 3-master Redis Cluster the suite starts itself."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from middleware import AsyncSessionManager, Config, SessionManager, ToolCall
from middleware.demo.device import LAB
from middleware.store import SessionKeys
from tests.conftest import RedisClusterProcesses

NAV = ToolCall(name="navigate_to_node", arguments={"userinterface_name": "google_tv", "node": "shop"}, result={"success": True})


@pytest.fixture
def cluster_config(atlas: Config, cluster_url: str, tmp_path: Path) -> Config:
    return atlas.with_overrides(store={"url": cluster_url, "cluster": True}, usage_log={"path": str(tmp_path / "u.jsonl")})


@pytest.fixture
def mgr(cluster_config: Config) -> Iterator[SessionManager]:
    with SessionManager(cluster_config) as manager:
        yield manager


def node_clients(cluster: RedisClusterProcesses) -> list[redis.Redis]:
    return [redis.Redis(host="127.0.0.1", port=node.port) for node in cluster.nodes]


def test_sessions_spread_over_nodes_and_each_lives_in_one_slot(mgr: SessionManager, redis_cluster: RedisClusterProcesses) -> None:
    """Many sessions land on every master; all keys of one session share a slot."""
    ids = [f"user-{i}" for i in range(30)]
    for sid in ids:
        mgr.record_turn(sid, user=f"hello from {sid}", assistant="hi", tool_calls=[NAV])
    holders = [c for c in node_clients(redis_cluster) if any(k != b"mw:sessions" for k in c.keys("mw:*"))]
    assert len(holders) == 3
    admin = node_clients(redis_cluster)[0]
    for sid in ids[:5]:
        slots = {admin.cluster("keyslot", key) for key in SessionKeys("mw", sid).session_keys}
        assert len(slots) == 1
    for sid in ids:
        state = mgr.get_state(sid)
        assert state.turns == 1 and state.recent[0]["content"] == f"hello from {sid}"


def test_every_operation_works_without_crossslot(mgr: SessionManager) -> None:
    """record (MULTI/EXEC), load, build, list, reset and chat all run on the cluster."""
    LAB.reset()
    for i in range(5):
        mgr.record_turn("s", user=f"go to node {i}", assistant=f"at {i}", tool_calls=[NAV])
    state = mgr.get_state("s")
    assert state.turns == 5 and len(state.summary) == 3 and len(state.recent) == 2
    assert mgr.build_messages("s", "next")[0]["content"].endswith("- userinterface_name: google_tv")
    page = mgr.store.list_sessions(search="s")
    assert [e.session_id for e in page.entries] == ["s"]
    result = mgr.chat("chat-1", "take control of device1 on sunri-pi1", model="scripted/atlas")
    assert result.recorded and mgr.get_state("chat-1").context["device_id"] == "device1"
    mgr.reset("s")
    assert mgr.get_state("s").turns == 0 and mgr.store.list_sessions(search="s").entries == []


def test_concurrent_writers_on_the_cluster_lose_nothing(cluster_config: Config) -> None:
    """8 threads x 50 turns into one session on the cluster: the counter ends at 400."""
    import threading

    with SessionManager(cluster_config) as mgr:
        threads = [
            threading.Thread(target=lambda w=w: [mgr.record_turn("hot", user=f"w{w} {i}", assistant="ok") for i in range(50)])
            for w in range(8)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert mgr.get_state("hot").turns == 400


def test_async_manager_on_the_cluster(cluster_config: Config) -> None:
    """The asyncio client works on the cluster too."""

    async def run() -> tuple[int, dict[str, str]]:
        async with AsyncSessionManager(cluster_config) as amgr:
            sid = f"async-{uuid.uuid4().hex[:6]}"
            for _ in range(3):
                await amgr.record_turn(sid, user="goto shop", assistant="ok", tool_calls=[NAV])
            state = await amgr.get_state(sid)
            await amgr.reset(sid)
            return state.turns, state.context

    assert asyncio.run(run()) == (3, {"userinterface_name": "google_tv"})


def test_the_listing_index_is_written_outside_the_session_transaction(cluster_config: Config, redis_cluster: RedisClusterProcesses) -> None:
    """The index key may live on another node; recording still succeeds and lists the session."""
    admin = node_clients(redis_cluster)[0]
    with SessionManager(cluster_config) as mgr:
        # Find a session whose slot differs from the index's slot.
        index_slot = admin.cluster("keyslot", "mw:sessions")
        sid = next(f"x{i}" for i in range(100) if admin.cluster("keyslot", SessionKeys("mw", f"x{i}").ctx) != index_slot)
        mgr.record_turn(sid, user="hi", assistant="hello")
        assert sid in [e.session_id for e in mgr.store.list_sessions().entries]
