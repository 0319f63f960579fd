"""A real redis-server stopped in the middle of a run and started again, on both faces.

The server requires a password (which must never show in errors or logs) and
keeps an append-only file, so data written before the stop is there afterwards
and "nothing lost" can be checked across the restart.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from middleware import Config, StoreUnavailableError, ToolCall
from middleware.testing import capture_events
from tests.conftest import Manager, RedisServer, open_manager

PASSWORD = "s3cret-pw-42"
TIMEOUT = 1.0
NAV = ToolCall(name="navigate_to_node", arguments={"userinterface_name": "google_tv", "node": "shop"})


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    node = RedisServer(tmp_path, password=PASSWORD, extra=("--appendonly", "yes", "--appendfsync", "always"))
    node.start()
    yield node
    if node.proc is not None:
        os.kill(node.proc.pid, signal.SIGCONT)
    node.stop()


def url(server: RedisServer) -> str:
    return f"redis://:{PASSWORD}@127.0.0.1:{server.port}/0"


@pytest.fixture
def connect(atlas: Config, server: RedisServer, tmp_path: Path, face: str, loop: asyncio.AbstractEventLoop) -> Any:
    """``connect(mode)``: a manager of the face under test on the password-protected server."""

    def make(mode: str = "raise", event_loop: asyncio.AbstractEventLoop = loop) -> Manager:
        config = atlas.with_overrides(
            store={"url": url(server), "timeout_seconds": TIMEOUT, "on_store_error": mode},
            usage_log={"path": str(tmp_path / "usage.jsonl")},
        )
        return open_manager(face, config, event_loop)

    return make


def test_a_stopped_server_raises_one_store_error_fast_and_the_process_recovers(connect: Any, server: RedisServer) -> None:
    """Default mode: StoreUnavailableError within the timeout, naming the store without the
    password; after a restart the same manager works again and earlier turns are there."""
    with connect() as mgr:
        mgr.record_turn("s", user="before the outage", assistant="ok", tool_calls=[NAV])
        server.stop()
        for call in (lambda: mgr.record_turn("s", user="during", assistant="x"), lambda: mgr.build_messages("s", "during")):
            started = time.monotonic()
            with pytest.raises(StoreUnavailableError) as info:
                call()
            assert time.monotonic() - started < TIMEOUT
            message = str(info.value)
            assert f"127.0.0.1:{server.port}" in message and PASSWORD not in message and "***" in message
        server.start()
        recovered = time.monotonic()
        assert mgr.record_turn("s", user="after the outage", assistant="ok") == 2
        assert time.monotonic() - recovered < TIMEOUT
        state = mgr.get_state("s")
        assert [m["content"] for m in state.recent] == ["after the outage", "ok"]
        assert state.context == {"userinterface_name": "google_tv"}


def test_a_hung_server_costs_one_timeout_not_a_hang(connect: Any, server: RedisServer) -> None:
    """A server that accepts but never answers (SIGSTOP): the call fails after about one
    timeout, and works again once the server resumes."""
    assert server.proc is not None
    with connect() as mgr:
        mgr.record_turn("s", user="hello", assistant="ok")
        os.kill(server.proc.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            with pytest.raises(StoreUnavailableError, match="Timeout"):
                mgr.get_state("s")
            elapsed = time.monotonic() - started
            assert TIMEOUT * 0.8 < elapsed < TIMEOUT * 2
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        assert mgr.get_state("s").turns == 1


def test_degrade_mode_composes_without_memory_and_records_nothing_silently(connect: Any, server: RedisServer) -> None:
    """degrade: the prompt is the system prompt plus the message, with a warning; a turn
    that cannot be written is reported and kept, then written first once the store is back."""
    with connect("degrade") as mgr:
        mgr.record_turn("s", user="navigate to watchlist on google_tv", assistant="ok", tool_calls=[NAV])
        server.stop()
        with capture_events() as events:
            messages = mgr.build_messages("s", "goto shop")
            assert mgr.record_turn("s", user="goto shop", assistant="Navigated to shop", tool_calls=[NAV]) == 0
        assert [m["role"] for m in messages] == ["system", "user"] and "## Current Context" not in messages[0]["content"]
        warnings = {e["event"]: e for e in events if e["log_level"] == "warning"}
        assert set(warnings) == {"store.degraded", "store.turn_not_recorded"}
        assert PASSWORD not in str(warnings) and warnings["store.turn_not_recorded"]["pending"] == 1
        assert [sid for sid, _ in mgr.pending_turns] == ["s"]
        server.start()
        assert mgr.record_turn("s", user="check current node", assistant="on shop") == 3
        assert mgr.pending_turns == []
        state = mgr.get_state("s")
        # The held turn was written before the new one, in order.
        assert state.summary == [
            "• navigate to watchlist on google_tv → Navigated to 'shop' on google_tv",
            "• goto shop → Navigated to 'shop' on google_tv",
        ]
        assert [m["content"] for m in state.recent] == ["check current node", "on shop"]


def test_turns_recorded_through_an_outage_all_arrive_in_degrade_mode(connect: Any, server: RedisServer) -> None:
    """A writer keeps recording while the server is stopped and started: every turn it
    recorded is in Redis afterwards, in order (nothing lost, nothing doubled)."""
    attempts: list[int] = []
    stop = threading.Event()

    def writer() -> None:  # its own manager (and event loop, on the async face), in its own thread
        event_loop = asyncio.new_event_loop()
        with connect("degrade", event_loop) as mgr:
            i = 0
            while not stop.is_set():
                mgr.record_turn("run", user=f"turn {i}", assistant=f"reply {i}")
                attempts.append(i)
                i += 1
                time.sleep(0.005)
            mgr.record_turn("run", user="final", assistant="done")  # flushes anything still pending
            assert mgr.pending_turns == []
        event_loop.close()

    thread = threading.Thread(target=writer)
    thread.start()
    time.sleep(0.3)
    server.stop()
    time.sleep(0.5)
    server.start()
    time.sleep(0.3)
    stop.set()
    thread.join()
    with connect() as mgr:
        state = mgr.get_state("run")
    assert len(attempts) > 20
    assert state.turns == len(attempts) + 1
    assert state.recent[0]["content"] == "final"


def lose_record_replies(mgr: Manager) -> None:
    """From now on, every turn's write reaches Redis but its reply is lost (the connection drops)."""
    store, real = mgr.store, mgr.store.send

    def lost(batch: Any, replies: list[Any]) -> None:
        if batch.commands[0][0] in {"evalsha", "eval"} and not isinstance(replies[0], Exception):
            raise StoreUnavailableError("Redis store ... is unreachable: reply lost")

    if inspect.iscoroutinefunction(real):

        async def send(batch: Any) -> Any:
            replies = await real(batch)
            lost(batch, replies)
            return replies
    else:

        def send(batch: Any) -> Any:
            replies = real(batch)
            lost(batch, replies)
            return replies

    store.send = send


def test_a_held_turn_that_did_reach_redis_is_not_written_twice(connect: Any, server: RedisServer) -> None:
    """A write whose reply is lost (the server applied it, then the connection dropped) is
    held in degrade mode; replaying it must not record the turn a second time."""
    with connect("degrade") as mgr:
        mgr.record_turn("dup", user="first", assistant="ok")
        lose_record_replies(mgr)
        assert mgr.record_turn("dup", user="second", assistant="ok") == 0
        del mgr.store.send  # the driver's own send again
        assert mgr.pending_turns[0][1].turn_id  # the held write carries its id
        assert mgr.record_turn("dup", user="third", assistant="ok") == 3  # not 4
        assert mgr.pending_turns == []
        assert [m["content"] for m in mgr.get_state("dup").recent] == ["third", "ok"]


def test_degrade_mode_holds_a_chat_turn_that_marks_its_session_composed(
    server: RedisServer, atlas: Config, tmp_path: Path, face: str, loop: asyncio.AbstractEventLoop
) -> None:
    """With the store stopped, a chat() turn priced as gpt-4o-mini with 40 tools discloses them,
    so it composes and marks its session so; the mark rides on its record, which degrade
    mode holds: the turn is answered and kept, not lost, and written, mark and all, once
    the store is back."""
    from tests.test_disclosure import Needs
    from tests.test_entrances import tools_for_chat

    config = atlas.with_overrides(
        store={"url": url(server), "timeout_seconds": TIMEOUT, "on_store_error": "degrade"},
        usage_log={"path": str(tmp_path / "usage.jsonl")}, caching={"price_as": "gpt-4o-mini"},
    )  # fmt: skip
    model = Needs({"goto shop": []})
    with open_manager(face, config, loop) as mgr:
        mgr.record_turn("s", user="navigate to watchlist on google_tv", assistant="ok", tool_calls=[NAV])
        server.stop()
        result = mgr.chat("s", "goto shop", model=model.model, tools=tools_for_chat())
        assert result.text == "nothing to do" and [sid for sid, _ in mgr.pending_turns] == ["s"]
        assert "load_tools" in model.requests[0]  # disclosed: the turn composed
        server.start()
        assert mgr.flush_pending() == 1
        state = mgr.get_state("s")
    assert state.turns == 2 and state.composed
