"""Regression tests for the store defects found by attacking it: racing writers, lost
replies, held turns, refusals, dead shards, eviction, unbounded held turns. Each runs on
both faces; each would fail on the store as it was (one MULTI/EXEC per turn, held turns
flushed for every session before any load)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from middleware import Config, StoreError, StoreUnavailableError
from middleware.store.keys import pair_keys, session_keys
from middleware.testing import FaultProxy, RedisCluster, RedisServer, capture_events
from tests.conftest import Manager, ManagerFactory, concurrently, open_manager, require_binary


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments, "result": {"ok": True}}


def auto(tmp_path: Path, **store: Any) -> Config:
    """The library default (auto context keys), logging to the test's folder."""
    return Config().with_overrides(usage_log={"path": str(tmp_path / "usage.jsonl")}, store=store)


def events_named(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [event for event in events if event["event"] == name]


# --- 1. context keys under racing writers -------------------------------------------------


def test_a_key_rewritten_by_fresh_writers_never_pushes_another_out(managers: ManagerFactory, tmp_path: Path, raw: Any) -> None:
    """device=tv1, then 33 writes of page=j, each from a fresh manager (none has seen the
    others' values): both keys stay, page holds the last value and its history the three
    before it, and nothing more is kept (it used to keep only {'page': '32'})."""
    config = auto(tmp_path)
    with managers(config) as first:
        first.record_turn("s", user="use tv1", assistant="ok", tool_calls=[call("select", device="tv1")])
    for j in range(33):
        with managers(config) as fresh:
            fresh.record_turn("s", user=f"page {j}", assistant="ok", tool_calls=[call("open", page=str(j))])
    with managers(config) as reader:
        state = reader.get_state("s")
    assert state.context == {"device": "tv1", "page": "32"}
    assert [value for value, _ in state.facts["page"]] == ["31", "30", "29"]
    assert raw.zcard(session_keys("mw", "s").ctx) == 1 + config.context.history


def test_racing_writers_of_different_keys_lose_none(managers: ManagerFactory, tmp_path: Path) -> None:
    """Ten writers at once, each setting its own key twice: all ten keys are there, each
    with its last value (async runs used to lose one or two)."""
    mgr = managers(auto(tmp_path))

    def write(m: Any, i: int) -> Any:
        return m.record_turn("s", user=f"set k{i % 10}", assistant="ok", tool_calls=[call("set", **{f"k{i % 10}": f"v{i}"})])

    concurrently(mgr, 10, write, each=2)
    context = mgr.get_state("s").context
    assert context.keys() == {f"k{i}" for i in range(10)}
    assert mgr.get_state("s").turns == 20


# --- 2. a lost reply, retried -------------------------------------------------------------


@pytest.fixture
def proxied(redis_server: RedisServer, real_redis_url: str) -> Iterator[FaultProxy]:
    """A fault-injecting proxy in front of the (emptied) real server."""
    with FaultProxy(redis_server.port) as proxy:
        yield proxy


def test_a_write_whose_reply_is_lost_is_stored_once(
    face: str, tmp_path: Path, proxied: FaultProxy, redis_server: RedisServer, loop: asyncio.AbstractEventLoop
) -> None:
    """A fault-injecting proxy lets the turn's write reach Redis, then resets the connection
    before the reply: redis-py retries once on the new connection, and the server
    recognises the turn id. One turn stored, the counter exact, the caller told the count."""
    with open_manager(face, auto(tmp_path), loop, redis_url=proxied.url) as mgr:
        mgr.record_turn("s", user="first", assistant="ok")
        proxied.lose_replies(b"EVALSHA", b"EXEC")  # the record script; a MULTI/EXEC transaction before it
        assert mgr.record_turn("s", user="second", assistant="ok") == 2
        assert proxied.lost == 1
        state = mgr.get_state("s")
        assert state.turns == 2 and [m["content"] for m in state.recent] == ["second", "ok"]
    assert redis_server.client().llen(session_keys("mw", "s").traces) == 2


def test_a_notes_edit_whose_reply_is_lost_is_applied_once(
    face: str, tmp_path: Path, proxied: FaultProxy, loop: asyncio.AbstractEventLoop
) -> None:
    """The notes' compare-and-set reaches Redis, its reply is lost and redis-py sends it
    again: the edit's id is filed with the notes, so it counts as done (it used to find the
    notes changed, read them again and append a second time)."""
    with open_manager(face, auto(tmp_path), loop, redis_url=proxied.url) as mgr:
        mgr.manage_notes("u", "a", "append", content="Prefers metric units.")
        proxied.lose_replies(b"EVAL")
        mgr.manage_notes("u", "a", "append", content="Allergic to walnuts.")
        assert proxied.lost == 1
        notes = mgr.manage_notes("u", "a", "read")
    assert notes.count("Allergic to walnuts.") == 1 and notes.count("Prefers metric units.") == 1


def test_a_notes_edit_whose_reply_is_lost_is_applied_once_when_another_writer_edits_meanwhile(
    face: str, tmp_path: Path, proxied: FaultProxy, redis_server: RedisServer, loop: asyncio.AbstractEventLoop
) -> None:
    """The edit lands, its reply is lost, another writer edits the notes before redis-py
    sends the edit again: the resent edit is known by its id and counts as done, so
    neither edit is lost and neither is applied twice."""
    key, other = pair_keys("mw", "u", "a").notes, redis_server.client()
    with open_manager(face, auto(tmp_path), loop, redis_url=proxied.url) as mgr:
        mgr.manage_notes("u", "a", "append", content="Prefers metric units.")
        proxied.lose_replies(b"EVAL", meanwhile=lambda: other.append(key, "\n\nLikes tea."))
        mgr.manage_notes("u", "a", "append", content="Allergic to walnuts.")
        assert proxied.lost == 1 and not proxied.errors
        notes = mgr.manage_notes("u", "a", "read")
    other.close()
    assert [notes.count(line) for line in ("Prefers metric units.", "Allergic to walnuts.", "Likes tea.")] == [1, 1, 1]


def test_a_notes_edit_replaces_an_edits_key_of_the_wrong_type(redis_managers: ManagerFactory, redis_server: RedisServer) -> None:
    """Something else written at the key of the notes' edit ids is replaced, as every key of
    the wrong type is on the next write, rather than failing every edit from then on."""
    edits = pair_keys("mw", "u", "a").edits
    redis_server.client().set(edits, "not a list")
    mgr = redis_managers()
    mgr.manage_notes("u", "a", "append", content="Prefers metric units.")
    assert mgr.notes("u", "a") == "Prefers metric units." and redis_server.client().type(edits) == b"list"


# --- 3. a held turn that did land ---------------------------------------------------------


def lose_record_replies(mgr: Manager, lose: list[bool]) -> None:
    """While ``lose[0]``, every turn's write that the store takes has its reply lost."""
    store, real = mgr.store, mgr.store.send

    def check(batch: Any, replies: list[Any]) -> None:
        if lose[0] and batch.commands[0][0] in {"evalsha", "eval"} and not isinstance(replies[0], Exception):
            raise StoreUnavailableError("Redis store ... is unreachable: reply lost")

    if inspect.iscoroutinefunction(real):

        async def send(batch: Any) -> Any:
            replies = await real(batch)
            check(batch, replies)
            return replies
    else:

        def send(batch: Any) -> Any:
            replies = real(batch)
            check(batch, replies)
            return replies

    store.send = send


def test_a_held_turn_that_landed_is_not_written_again_after_another_writers_turn(
    managers: ManagerFactory, tmp_path: Path, raw: Any
) -> None:
    """Writer A's turn lands but its reply is lost, so A holds it (degrade); writer B then
    records a turn. When A writes its held turn, Redis already has it: the session holds
    A1, B1, A2 in that order, three turns (the old check saw only B1 and wrote A1 again)."""
    config = auto(tmp_path, on_store_error="degrade")
    a, b = managers(config), managers(config)
    lose = [True]
    lose_record_replies(a, lose)
    assert a.record_turn("s", user="A1", assistant="ok") == 0 and len(a.pending_turns) == 1
    assert b.record_turn("s", user="B1", assistant="ok") == 2
    lose[0] = False
    assert a.record_turn("s", user="A2", assistant="ok") == 3
    assert a.pending_turns == []
    traces = raw.lrange(session_keys("mw", "s").traces, 0, -1)
    assert [orjson.loads(t)["events"][0]["content"] for t in traces] == ["A1", "B1", "A2"]
    assert a.get_state("s").turns == 3


# --- 5. one rejected write, one session ------------------------------------------------------


@pytest.fixture
def oom_server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "oom", extra=("--maxmemory-policy", "noeviction")) as server:
        yield server


def test_a_write_refused_for_memory_holds_up_only_its_own_session(
    face: str, tmp_path: Path, oom_server: RedisServer, loop: asyncio.AbstractEventLoop
) -> None:
    """Under noeviction at maxmemory a write is refused (OOM): in degrade mode that turn is
    held, but another session composes with its memory, and the held session itself
    composes with what it has; once memory frees, the held turn is written first, in order."""
    admin = oom_server.client()
    with open_manager(face, auto(tmp_path, url=oom_server.url, on_store_error="degrade"), loop) as mgr:
        mgr.record_turn("healthy", user="remember the blue door", assistant="noted")
        mgr.record_turn("held", user="first", assistant="ok")
        admin.config_set("maxmemory", 1)  # any write now exceeds it
        with capture_events() as events:
            assert mgr.record_turn("held", user="second", assistant="ok") == 0
        assert "OutOfMemoryError" in events_named(events, "store.turn_not_recorded")[0]["error"]
        healthy = mgr.build_messages("healthy", "which door?")
        assert any("blue door" in m["content"] for m in healthy)
        with capture_events() as events:
            held = mgr.build_messages("held", "and now?")
        assert any(m["content"] == "first" for m in held) and events_named(events, "store.pending_not_recorded")
        admin.config_set("maxmemory", 0)
        assert mgr.record_turn("held", user="third", assistant="ok") == 3
        assert [m["content"] for m in mgr.get_state("held").recent] == ["third", "ok"] and mgr.pending_turns == []


@pytest.fixture
def partial_cluster(tmp_path: Path) -> Iterator[RedisCluster]:
    """A cluster whose nodes keep serving their own slots when another is down."""
    cluster = RedisCluster(
        tmp_path / "cluster",
        binary=require_binary("redis-server"),
        cli=require_binary("redis-cli"),
        extra=("--cluster-require-full-coverage", "no"),
    )
    with cluster:
        yield cluster


def on_other_node(cluster: RedisCluster, *avoid: RedisServer) -> str:
    """A session id whose keys live on a node other than ``avoid``."""
    return next(f"s{i}" for i in range(1000) if cluster.node_of(f"mw:{{s{i}}}:meta") not in avoid)


def test_a_dead_shard_fails_neither_a_healthy_session_nor_the_turn_the_index_misses(
    face: str, tmp_path: Path, partial_cluster: RedisCluster, loop: asyncio.AbstractEventLoop
) -> None:
    """On a cluster with the listing index's node down, a turn of a healthy session is
    recorded (the index is best effort: a warning, not an error); a turn held for a session
    on the dead node does not empty the prompt of the healthy one."""
    index_node = partial_cluster.node_of("mw:sessions")
    healthy = on_other_node(partial_cluster, index_node)
    dead = next(f"d{i}" for i in range(1000) if partial_cluster.node_of(f"mw:{{d{i}}}:meta") is index_node)
    config = auto(tmp_path, url=partial_cluster.url, cluster=True, on_store_error="degrade", timeout_seconds=1.0)
    with open_manager(face, config, loop) as mgr:
        mgr.record_turn(healthy, user="remember the blue door", assistant="noted")
        index_node.stop()
        with capture_events() as events:
            assert mgr.record_turn(healthy, user="second", assistant="ok") == 2
        assert events_named(events, "store.index_not_updated") and not events_named(events, "store.turn_not_recorded")
        assert mgr.record_turn(dead, user="lost shard", assistant="ok") == 0
        messages = mgr.build_messages(healthy, "which door?")
        assert any("blue door" in m["content"] for m in messages), messages
        assert mgr.get_state(healthy).turns == 2 and len(mgr.pending_turns) == 1


# --- 4. a cluster that is down is an error, not an empty memory ------------------------------


def test_a_cluster_that_is_down_is_an_error_not_an_empty_memory(
    face: str, tmp_path: Path, loop: asyncio.AbstractEventLoop
) -> None:
    """With one master gone and full coverage required, the live nodes answer CLUSTERDOWN:
    build_messages raises StoreError (a degrade-mode manager says store.degraded), never a
    prompt composed as if the session were empty."""
    cluster = RedisCluster(tmp_path / "cluster", binary=require_binary("redis-server"), cli=require_binary("redis-cli"))
    with cluster:
        config = auto(tmp_path, url=cluster.url, cluster=True, timeout_seconds=1.0)
        with open_manager(face, config, loop) as mgr:
            sid = on_other_node(cluster, cluster.nodes[2])
            mgr.record_turn(sid, user="remember the blue door", assistant="noted")
            cluster.nodes[2].stop()
            deadline = time.monotonic() + 30
            while cluster.nodes[0].client().cluster("info").get("cluster_state") != "fail":
                assert time.monotonic() < deadline, "the cluster never noticed the dead node"
                time.sleep(0.2)
            with pytest.raises(StoreError):
                mgr.build_messages(sid, "which door?")


# --- eviction ------------------------------------------------------------------------------


def test_a_session_missing_parts_is_reported_and_counted_from_what_is_left(
    managers: ManagerFactory, tmp_path: Path, raw: Any
) -> None:
    """Parts of a session gone (as an allkeys-* policy evicts them): the load warns
    store.partial_session naming them; with its counters gone the turn count comes from
    the ids of the last turns, and the next turn counts on from there (it used to say 0)."""
    mgr = managers(auto(tmp_path))
    for i in range(5):
        mgr.record_turn("s", user=f"turn {i}", assistant="ok")
    keys = session_keys("mw", "s")
    raw.delete(keys.meta)
    with capture_events() as events:
        assert mgr.get_state("s").turns == 5
    assert [e["missing"] for e in events_named(events, "store.partial_session")] == [["meta"]]
    assert mgr.record_turn("s", user="turn 5", assistant="ok") == 6
    raw.delete(keys.recent)
    with capture_events() as events:
        state = mgr.get_state("s")
    assert state.turns == 6 and [e["missing"] for e in events_named(events, "store.partial_session")] == [["recent"]]
    with capture_events() as events:
        assert mgr.get_state("never-written").turns == 0
    assert not events_named(events, "store.partial_session")


@pytest.mark.parametrize(("policy", "warned"), [("allkeys-lru", True), ("noeviction", False)])
def test_the_first_call_warns_when_the_server_may_evict_our_keys(
    face: str, tmp_path: Path, loop: asyncio.AbstractEventLoop, policy: str, warned: bool
) -> None:
    """An allkeys-* maxmemory-policy can evict parts of sessions, notes and the index:
    the first store call of a manager says so, once."""
    with RedisServer(tmp_path / "r", extra=("--maxmemory-policy", policy)) as server:
        with open_manager(face, auto(tmp_path, url=server.url), loop) as mgr, capture_events() as events:
            mgr.build_messages("s", "hi")
            mgr.record_turn("s", user="hi", assistant="hello")
        warnings = [e for e in events_named(events, "store.eviction_possible") if e["log_level"] == "warning"]
        assert [e["policy"] for e in warnings] == ([policy] if warned else [])


# --- bounded by bytes --------------------------------------------------------------------------


def test_held_turns_are_bounded_by_bytes_as_well_as_by_count(face: str, tmp_path: Path, loop: asyncio.AbstractEventLoop) -> None:
    """With the store unreachable, large turns held in degrade mode never take more than
    store.max_pending_bytes: the oldest go first, each drop logged."""
    from middleware.testing import free_port

    config = auto(tmp_path, url=f"redis://127.0.0.1:{free_port()}/0", on_store_error="degrade",
                  max_pending_bytes=200_000, timeout_seconds=0.5)  # fmt: skip
    with open_manager(face, config, loop) as mgr, capture_events() as events:
        for i in range(10):
            assert mgr.record_turn("s", user=f"{i} " + "x" * 50_000, assistant="ok") == 0
        held = mgr.pending_turns
    assert 1 <= len(held) <= 4 and held[-1][1].recent[0].content.startswith("9 ")
    assert len(events_named(events, "store.pending_overflow")) == 10 - len(held)


def test_a_turn_of_thousands_of_tool_calls_keeps_a_bounded_trace(managers: ManagerFactory, tmp_path: Path, raw: Any) -> None:
    """2,000 tool calls in one turn: the stored trace stays near traces.max_turn_chars, the
    calls past it counted in one omitted event; the context and the count are intact."""
    mgr = managers(auto(tmp_path))
    calls = [call("read_file", path=f"/data/file-{i:04d}.txt") | {"result": "y" * 2_000} for i in range(2_000)]
    assert mgr.record_turn("s", user="read them all", assistant="done", tool_calls=calls) == 1
    (trace,) = raw.lrange(session_keys("mw", "s").traces, 0, -1)
    events = orjson.loads(trace)["events"]
    assert len(trace) < 70_000
    omitted = [e for e in events if e["type"] == "omitted"]
    kept = [e for e in events if e["type"] == "tool_call"]
    assert len(omitted) == 1 and omitted[0]["tool_calls"] + len(kept) == 2_000
    assert mgr.get_state("s").context == {"path": "/data/file-1999.txt"}
