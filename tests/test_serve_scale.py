"""Scale out: several endpoint processes share one real redis-server (and, in-process, a Redis
Cluster) and lose nothing: concurrent requests to one session are recorded once each, in the
order they arrived."""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from middleware import SessionManager
from middleware.serve import create_app
from middleware.store.keys import session_keys
from middleware.testing import free_port, register, serving
from tests.conftest import wait_for_health
from tests.serve_workers import TOOLS, config_for, gated, serve_endpoint

pytestmark = pytest.mark.slow
register("gated", gated)


@pytest.fixture
def endpoints(real_redis_url: str, tmp_path: Path) -> Iterator[list[str]]:
    """Three endpoint processes on one redis-server; their base URLs."""
    context = multiprocessing.get_context("spawn")
    ports = [free_port() for _ in range(3)]
    processes = [context.Process(target=serve_endpoint, args=(real_redis_url, port, str(tmp_path / f"usage-{port}.jsonl")), daemon=True)
                 for port in ports]  # fmt: skip
    for process in processes:
        process.start()
    try:
        for port, process in zip(ports, processes, strict=True):
            wait_for_health(f"http://127.0.0.1:{port}/health", process.is_alive)
        yield [f"http://127.0.0.1:{port}/v1" for port in ports]
    finally:
        for process in processes:
            process.terminate()
            process.join(timeout=10)


def traces(redis_url: str, log: Path, session: str) -> list[dict[str, Any]]:
    with SessionManager(config_for(redis_url, str(log))) as mgr:
        return [json.loads(raw) for raw in mgr.inspect(session, traces=10_000).traces]


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=120)


def test_many_clients_through_three_processes_lose_nothing(endpoints: list[str], real_redis_url: str, tmp_path: Path) -> None:
    """6 clients x 20 turns into one session, each request to the next process in turn, half of the
    clients sending their whole history: 120 turns, each recorded once, each client's in its order."""
    clients = [client(url) for url in endpoints]
    errors: list[BaseException] = []

    def talk(number: int) -> None:
        history: list[dict[str, Any]] = []
        try:
            for i in range(20):
                history.append({"role": "user", "content": f"c{number} t{i}"})
                sent = history if number % 2 else history[-1:]
                reply = clients[(number + i) % 3].chat.completions.create(model="scripted/echo", messages=sent,  # type: ignore[arg-type]
                                                                          extra_headers={"X-Session-Id": "shared"})  # fmt: skip
                history.append({"role": "assistant", "content": reply.choices[0].message.content})
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=talk, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    users = [record["events"][0]["content"] for record in traces(real_redis_url, tmp_path / "u.jsonl", "shared")]
    assert sorted(users) == sorted(f"c{n} t{i}" for n in range(6) for i in range(20))  # once each
    for n in range(6):
        mine = [int(u.split(" t")[1]) for u in users if u.startswith(f"c{n} ")]
        assert mine == list(range(20))
    with SessionManager(config_for(real_redis_url, str(tmp_path / "u.jsonl"))) as mgr:
        assert mgr.get_state("shared").turns == 120


def test_a_turn_that_arrived_first_is_recorded_first(endpoints: list[str], real_redis_url: str, tmp_path: Path) -> None:
    """A slow request on one process and a fast one, arriving after it, on another: the fast one
    waits in Redis, unrecorded, until the slow one is recorded before it."""
    gate = tmp_path / "gate"
    slow = threading.Thread(target=lambda: client(endpoints[0]).chat.completions.create(
        model="scripted/gated", messages=[{"role": "user", "content": f"{gate} | slow"}], extra_headers={"X-Session-Id": "race"}))  # fmt: skip
    slow.start()
    live_key = session_keys("mw", "race").live
    with SessionManager(config_for(real_redis_url, str(tmp_path / "u.jsonl"))) as mgr:
        raw = mgr.store.client  # type: ignore[attr-defined]
        deadline = time.monotonic() + 60
        while raw.hget(live_key, "arrived") != b"1":  # the slow one has its place
            assert time.monotonic() < deadline
            time.sleep(0.01)
        fast = client(endpoints[1]).chat.completions.create(model="scripted/gated", messages=[{"role": "user", "content": "fast"}],
                                                            extra_headers={"X-Session-Id": "race"})  # fmt: skip
        assert fast.choices[0].message.content == "done: fast"
        assert mgr.get_state("race").turns == 0  # answered, and waiting for the slow turn
        gate.touch()
        slow.join()
        state = mgr.get_state("race")
    assert state.turns == 2 and state.recent[0]["content"] == "fast"
    assert [r["events"][0]["content"] for r in traces(real_redis_url, tmp_path / "u.jsonl", "race")] == [f"{gate} | slow", "fast"]


def test_a_tool_turn_started_on_one_process_ends_on_another(endpoints: list[str], real_redis_url: str, tmp_path: Path) -> None:
    """A client sending only new messages asks on one process and sends the tool result to another."""
    first = client(endpoints[0]).chat.completions.create(model="scripted/gated", messages=[{"role": "user", "content": "Oslo"}],
                                                         tools=TOOLS, extra_headers={"X-Session-Id": "hop"})  # type: ignore[arg-type]  # fmt: skip
    (call,) = first.choices[0].message.tool_calls or ()
    final = client(endpoints[2]).chat.completions.create(
        model="scripted/gated", tools=TOOLS, extra_headers={"X-Session-Id": "hop"},  # type: ignore[arg-type]
        messages=[{"role": "tool", "tool_call_id": call.id, "content": '{"sky": "snow"}'}])  # fmt: skip
    assert final.choices[0].message.content == 'weather: {"sky": "snow"}'
    with SessionManager(config_for(real_redis_url, str(tmp_path / "u.jsonl"))) as mgr:
        state = mgr.get_state("hop")
    assert state.turns == 1 and state.context == {"city": "Oslo"}


def test_two_endpoints_on_a_redis_cluster_share_turns_in_order(cluster_url: str, tmp_path: Path) -> None:
    """On a Redis Cluster (no CROSSSLOT): a tool turn hops between two endpoints and queued turns
    are applied in arrival order."""
    config = config_for(cluster_url, str(tmp_path / "usage.jsonl"), cluster=True)
    with serving(create_app(config)) as one, serving(create_app(config)) as two:
        a, b = client(f"{one}/v1"), client(f"{two}/v1")
        first = a.chat.completions.create(model="scripted/gated", messages=[{"role": "user", "content": "Lima"}], tools=TOOLS,  # type: ignore[arg-type]
                                          extra_headers={"X-Session-Id": "cl"})  # fmt: skip
        (call,) = first.choices[0].message.tool_calls or ()
        b.chat.completions.create(model="scripted/gated", tools=TOOLS, extra_headers={"X-Session-Id": "cl"},  # type: ignore[arg-type]
                                  messages=[{"role": "tool", "tool_call_id": call.id, "content": "sun"}])  # fmt: skip
        for i in range(5):
            (a if i % 2 else b).chat.completions.create(model="scripted/echo", messages=[{"role": "user", "content": f"m{i}"}],
                                                        extra_headers={"X-Session-Id": "cl"})  # fmt: skip
        with SessionManager(config) as mgr:
            state = mgr.get_state("cl")
            users = [json.loads(r)["events"][0]["content"] for r in mgr.inspect("cl").traces]
    assert state.turns == 6 and state.context == {"city": "Lima"}
    assert users == ["Lima", "m0", "m1", "m2", "m3", "m4"]
