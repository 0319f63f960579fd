"""Tests for the session store through the managers: both faces, on fakeredis (memory://)
and on a real redis-server."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from middleware import (
    AsyncSessionManager,
    Config,
    RedisStore,
    SessionManager,
    StoreError,
    StoreUnavailableError,
    ToolCall,
    apply_turn,
)
from middleware.core.state import Piece, Turn
from middleware.store.keys import Layout, session_keys
from middleware.store.record import record
from middleware.testing import capture_events
from tests.conftest import Manager, ManagerFactory, RedisServer


def nav(node: str, ui: str = "google_tv") -> ToolCall:
    return ToolCall(name="navigate_to_node", arguments={"userinterface_name": ui, "node": node}, result={"ok": 1})


def test_recorded_turn_reads_back(manager: Manager) -> None:
    """A recorded turn comes back as context, recent window and counters."""
    manager.record_turn("s1", user="navigate to watchlist on google_tv", assistant="Done", tool_calls=[nav("watchlist")])
    state = manager.get_state("s1")
    assert state.context == {"userinterface_name": "google_tv"}
    assert state.recent == [
        {"role": "user", "content": "navigate to watchlist on google_tv"},
        {"role": "assistant", "content": "Done"},
    ]
    assert state.summary == []  # the only turn is in the recent window
    assert state.turns == 1 and state.full_tokens > 0 and len(state.recent_tokens) == 2
    assert state.created_at is not None and state.updated_at is not None


def test_summary_keeps_three_older_lines_and_two_recent_messages(manager: Manager) -> None:
    """After many turns: 3 summary lines for the turns before the recent one, 2 recent messages."""
    for i in range(7):
        manager.record_turn("s", user=f"go to node {i}", assistant=f"at {i}", tool_calls=[nav(f"n{i}")])
    state = manager.get_state("s")
    assert state.summary == [f"• go to node {i} → Navigated to 'n{i}' on google_tv" for i in (3, 4, 5)]
    assert [m["content"] for m in state.recent] == ["go to node 6", "at 6"]
    assert state.turns == 7


def test_every_key_of_a_session_shares_one_hash_tag(manager: Manager, raw: Any) -> None:
    """All per-session keys carry {session id}, so a session lives in one cluster slot."""
    manager.record_turn("user:42", user="hi", assistant="hello", tool_calls=[nav("home")])
    keys = sorted(k.decode() for k in raw.keys("mw:*"))
    session_keys = [k for k in keys if k != "mw:sessions"]
    assert session_keys == [
        "mw:{user:42}:arc",
        "mw:{user:42}:ctx",
        "mw:{user:42}:ids",
        "mw:{user:42}:idx",
        "mw:{user:42}:meta",
        "mw:{user:42}:recent",
        "mw:{user:42}:sum",
        "mw:{user:42}:traces",
    ]


def test_braces_in_session_ids_cannot_break_the_hash_tag(manager: Manager) -> None:
    """Ids with braces are escaped in keys, stay distinct, and round-trip."""
    for sid in ["a}b", "{a}", "a%7Db", "}{"]:
        manager.record_turn(sid, user=f"hello {sid}", assistant="ok")
    for sid in ["a}b", "{a}", "a%7Db", "}{"]:
        assert manager.get_state(sid).recent[0]["content"] == f"hello {sid}"
    tags = {session_keys("mw", sid).ctx for sid in ["a}b", "{a}", "a%7Db", "}{"]}
    assert len(tags) == 4
    for key in tags:
        inner = key[key.index("{") + 1 : key.index("}")]
        assert "{" not in inner


def test_every_write_refreshes_the_ttl_of_the_whole_session(atlas: Config, managers: ManagerFactory, raw: Any) -> None:
    """All session keys get the configured TTL on every write, context included."""
    config = atlas.with_overrides(store={"ttl_seconds": 100})
    with managers(config) as mgr:
        mgr.record_turn("s", user="a", assistant="b", tool_calls=[nav("x")])
        for key in session_keys("mw", "s"):
            raw.pexpire(key, 5_000)
        mgr.record_turn("s", user="c", assistant="d")  # sets no context key
        present = [key for key in session_keys("mw", "s") if raw.exists(key)]
        assert len(present) == 8  # all but the last-prompt key, written only when a prompt was composed
        ttls = [raw.pttl(key) for key in present]
        assert all(95_000 < ttl <= 100_000 for ttl in ttls), ttls


def test_ttl_zero_keeps_sessions_forever(atlas: Config, managers: ManagerFactory, raw: Any) -> None:
    """ttl_seconds: 0 removes any expiry."""
    with managers(atlas.with_overrides(store={"ttl_seconds": 0})) as mgr:
        mgr.record_turn("s", user="a", assistant="b", tool_calls=[nav("x")])
        present = [key for key in session_keys("mw", "s") if raw.exists(key)]
        assert len(present) == 8  # all but the last-prompt key, written only when a prompt was composed
        assert all(raw.pttl(key) == -1 for key in present)


def test_reset_forgets_the_session(manager: Manager, raw: Any) -> None:
    """reset deletes every key of the session and its index entry."""
    manager.record_turn("s", user="a", assistant="b", tool_calls=[nav("x")])
    manager.reset("s")
    state = manager.get_state("s")
    assert (state.turns, state.context, state.recent, state.summary) == (0, {}, [], [])
    assert raw.keys("mw:{s}:*") == []
    assert raw.zscore("mw:sessions", "s") is None


def test_sessions_do_not_see_each_other(manager: Manager) -> None:
    """Two sessions keep separate context, summary and recent messages."""
    manager.record_turn("a", user="in a", assistant="A", tool_calls=[nav("x", ui="tv_a")])
    manager.record_turn("b", user="in b", assistant="B", tool_calls=[nav("y", ui="tv_b")])
    assert manager.get_state("a").context == {"userinterface_name": "tv_a"}
    assert manager.get_state("b").recent[0]["content"] == "in b"


def test_corrupt_records_are_skipped_with_a_warning(manager: Manager, raw: Any) -> None:
    """Garbage written straight into Redis is skipped; the rest of the session still loads."""
    manager.record_turn("s", user="a", assistant="b", tool_calls=[nav("x")])
    manager.record_turn("s", user="c", assistant="d")
    keys = session_keys("mw", "s")
    raw.zadd(keys.ctx, {"no equals sign": 9e15, "bad key!=v": 9e15, "tree_id=": 9e15, "tree_id=\n\t ": 9e15})
    raw.rpush(keys.recent, b"\xff\xfe garbage", json.dumps({"role": "system", "content": "x"}))
    raw.hset(keys.meta, "full_tokens", "lots")
    with capture_events() as events:
        state = manager.get_state("s")
    assert state.context == {"userinterface_name": "google_tv"}
    assert [m["content"] for m in state.recent] == ["c", "d"]  # junk after the pair is skipped
    warnings = [e for e in events if e["event"] == "store.corrupt_record"]
    assert {e["key"] for e in warnings} == {"ctx", "recent", "meta"}
    assert state.turns == 2 and state.full_tokens == 0


def test_a_key_of_the_wrong_type_is_reported_and_repaired_on_write(manager: Manager, raw: Any) -> None:
    """A foreign value at a session key is skipped on load and replaced on the next write,
    without applying the other commands twice."""
    manager.record_turn("s", user="a", assistant="b")
    keys = session_keys("mw", "s")
    raw.delete(keys.recent)
    raw.set(keys.recent, "a string, not a list")
    with capture_events() as events:
        assert manager.get_state("s").recent == []
        turns = manager.record_turn("s", user="c", assistant="d")
    assert turns == 2  # the counter moved once
    assert [m["content"] for m in manager.get_state("s").recent] == ["c", "d"]
    assert {"store.corrupt_record", "store.repaired"} <= {e["event"] for e in events}


def _set_keys(mgr: Any, *turns: dict[str, str]) -> None:
    """One recorded turn of session "s" per mapping, whose one call sets those keys."""
    for arguments in turns:
        mgr.record_turn("s", user="x", assistant="y", tool_calls=[ToolCall(name="t", arguments=arguments)])


def _context_members(raw: Any) -> list[str]:
    return sorted(m.decode() for m in raw.zrange(session_keys("mw", "s").ctx, 0, -1))


def test_context_keeps_the_most_recently_set_keys_in_auto_mode(atlas: Config, managers: ManagerFactory, raw: Any) -> None:
    """Auto mode keeps at most max_keys keys, evicting the least recently set."""
    config = atlas.with_overrides(context={"keys": None, "tools": None, "max_keys": 3, "earlier_keys": 0})
    with managers(config) as mgr:
        _set_keys(mgr, {"a": "a"}, {"b": "b"}, {"c": "c"}, {"d": "d"}, {"b": "b2"}, {"e": "e"})
        state = mgr.get_state("s")
        assert state.context == {"b": "b2", "d": "d", "e": "e"}
        # The value b2 replaced stays as b's history (with the turn that set it); evicted keys are gone.
        assert state.facts == {"b": [("b", 2)]}
        assert _context_members(raw) == ["b=b", "b=b2", "d=d", "e=e"]


def test_keys_pushed_out_of_the_context_stay_as_earlier_keys_within_their_bound(
    atlas: Config, managers: ManagerFactory, raw: Any
) -> None:
    """Beyond max_keys, the next earlier_keys keys set last are kept apart (oldest first),
    with their history; keys set before those are evicted, from the store too."""
    config = atlas.with_overrides(context={"keys": None, "tools": None, "max_keys": 2, "earlier_keys": 2})
    with managers(config) as mgr:
        _set_keys(mgr, {"a": "a"}, {"b": "b"}, {"c": "c"}, {"d": "d"}, {"b": "b2"}, {"e": "e"})
        state = mgr.get_state("s")
        assert state.context == {"b": "b2", "e": "e"}
        assert state.earlier == {"c": "c", "d": "d"}  # a, set before them, is gone
        assert state.facts == {"b": [("b", 2)]}
        assert _context_members(raw) == ["b=b", "b=b2", "c=c", "d=d", "e=e"]
        # Set again, an earlier key is current again, and the oldest current one steps back.
        _set_keys(mgr, {"c": "c2"})
        state = mgr.get_state("s")
        assert state.context == {"e": "e", "c": "c2"} and state.earlier == {"d": "d", "b": "b2"}


def test_racing_writers_never_lose_a_context_value(managers: ManagerFactory) -> None:
    """A writer that never loaded (so cannot remove old members) still wins by recency."""
    with managers() as one, managers() as two:
        one.record_turn("s", user="x", assistant="y", tool_calls=[nav("a", ui="first")])
        two.record_turn("s", user="x", assistant="y", tool_calls=[nav("b", ui="second")])
        assert one.get_state("s").context == {"userinterface_name": "second"}
        one.record_turn("s", user="x", assistant="y", tool_calls=[nav("c", ui="third")])
        assert two.get_state("s").context == {"userinterface_name": "third"}


def test_memory_store_needs_no_server(managers: ManagerFactory) -> None:
    """memory:// works with nothing listening, and names share data within a process."""
    name = f"memory://shared-{uuid.uuid4().hex}"
    with managers(redis_url=name) as a, managers(redis_url=name) as b:
        a.record_turn("s", user="hi", assistant="hello")
        assert b.get_state("s").turns == 1
    with managers(redis_url=f"memory://other-{uuid.uuid4().hex}") as c:
        assert c.get_state("s").turns == 0


def test_unreachable_redis_raises_store_unavailable_without_the_password(atlas: Config, managers: ManagerFactory) -> None:
    """A closed port gives StoreUnavailableError naming the store with its password hidden."""
    from middleware.testing import free_port

    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    config = atlas.with_overrides(store={"timeout_seconds": 0.5})
    with managers(config, redis_url=url) as mgr:
        with pytest.raises(StoreUnavailableError) as info:
            mgr.get_state("s")
        assert "hunter2" not in str(info.value) and "127.0.0.1" in str(info.value)
        assert "hunter2" not in repr(mgr)


def test_degrade_mode_holds_turns_up_to_the_limit_and_says_what_it_dropped(atlas: Config, managers: ManagerFactory) -> None:
    """With the store unreachable in degrade mode, turns wait in memory up to
    store.max_pending_turns; the oldest is dropped beyond it, with an error event."""
    from middleware.testing import free_port

    config = atlas.with_overrides(store={"timeout_seconds": 0.5, "on_store_error": "degrade", "max_pending_turns": 2})
    with managers(config, redis_url=f"redis://127.0.0.1:{free_port()}/0") as mgr, capture_events() as events:
        assert [mgr.record_turn(f"s{i}", user=f"turn {i}", assistant="ok") for i in range(3)] == [0, 0, 0]
        assert [sid for sid, _ in mgr.pending_turns] == ["s1", "s2"]
    assert [(e["event"], e["session"]) for e in events if e["log_level"] == "error"] == [("store.pending_overflow", "s0")]


# --- real redis-server only -------------------------------------------------


def round_trips(admin: redis.Redis, operation: Any) -> int:
    """Round trips the server saw for ``operation`` (its socket reads, the INFO call's own taken off)."""
    before = int(admin.info("stats")["total_reads_processed"])
    operation()
    return int(admin.info("stats")["total_reads_processed"]) - before - 1


def test_load_is_one_round_trip_and_record_is_one_transaction(redis_managers: ManagerFactory, redis_server: RedisServer) -> None:
    """Against real Redis: a load is one round trip; a record is one round trip holding one
    command, the record script by its SHA (what it reads, it reads on the server: no
    read-modify-write from the client, no WATCH)."""
    mgr = redis_managers()
    # Connect and have the server learn the scripts first, once per server: the message has
    # terms, so the load script (recall) runs too.
    mgr.build_messages("warm", "goto shop")
    mgr.record_turn("warm", user="a", assistant="b")
    admin = redis_server.client()
    assert round_trips(admin, lambda: mgr.build_messages("s", "goto shop")) == 1
    admin.config_resetstat()
    assert round_trips(admin, lambda: mgr.record_turn("s", user="goto shop", assistant="ok", tool_calls=[nav("shop")])) == 1
    stats = admin.info("commandstats")
    assert stats["cmdstat_evalsha"]["calls"] == 1
    assert not any(name in stats for name in ("cmdstat_eval", "cmdstat_multi", "cmdstat_watch", "cmdstat_get", "cmdstat_lrange"))


def test_scripts_survive_a_dropped_connection_and_a_flushed_script_cache(
    redis_managers: ManagerFactory, redis_server: RedisServer
) -> None:
    """The sync store sends its scripts on a pooled connection itself, past redis-py's
    per-command layers: connections the server closed (CLIENT KILL) are replaced when
    taken from the pool, and a server that forgot the scripts (SCRIPT FLUSH) gets their
    text, on both faces."""
    mgr = redis_managers()
    mgr.record_turn("s", user="goto shop", assistant="ok", tool_calls=[nav("shop")])
    admin = redis_server.client()
    assert admin.client_kill_filter(_type="normal", skipme=True) >= 1
    assert mgr.record_turn("s", user="goto home", assistant="ok", tool_calls=[nav("home")]) == 2
    admin.client_kill_filter(_type="normal", skipme=True)
    assert mgr.build_messages("s", "goto shop")[-1] == {"role": "user", "content": "goto shop"}
    admin.script_flush()
    assert mgr.record_turn("s", user="goto live", assistant="ok", tool_calls=[nav("live")]) == 3
    admin.script_flush()
    state = mgr.get_state("s")
    assert state.turns == 3 and state.recent[0] == {"role": "user", "content": "goto live"}
    assert mgr.build_messages("s", "goto shop")[-1] == {"role": "user", "content": "goto shop"}


def test_a_script_whose_connection_drops_is_sent_again_once(atlas: Config, real_redis_url: str, monkeypatch: Any) -> None:
    """A pooled connection can pass the pool's check and still be gone when the script is
    sent (the server restarted in between): the sync store opens it again and sends once
    more, as the client's retry policy (one retry) says; a second drop is the store
    unreachable. Dropped here where redis-py writes a packed command to the socket (the
    store packs its scripts itself where hiredis is installed, else redis-py does)."""
    drops: list[str] = []
    real = redis.connection.AbstractConnection.send_packed_command

    def dropping(self: Any, command: Any, *args: Any, **kwargs: Any) -> None:
        head = b"".join(command) if isinstance(command, list) else bytes(command)
        name = next((n for n in ("EVALSHA", "EVAL") if f"\r\n{n}\r\n".encode() in head[:40]), None)
        if name and len(drops) < budget:
            drops.append(name)
            self.disconnect()
            raise redis.ConnectionError("Connection closed by server.")
        real(self, command, *args, **kwargs)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", dropping)
    with SessionManager(atlas.with_overrides(usage_log={"path": None}), redis_url=real_redis_url) as mgr:
        budget = 1
        assert mgr.record_turn("dropped", user="goto shop", assistant="ok", tool_calls=[nav("shop")]) == 1
        assert drops == ["EVALSHA"]
        budget = 3
        with pytest.raises(StoreUnavailableError, match="Connection closed by server"):
            mgr.build_messages("dropped", "goto shop")
        assert drops == ["EVALSHA"] * 3  # the record's drop, then the load's first try and its one retry
        assert mgr.get_state("dropped").turns == 1


def test_an_instrumented_client_still_sees_every_script(atlas: Config, real_redis_url: str, monkeypatch: Any) -> None:
    """Instrumentation that wraps redis-py's ``Redis.execute_command`` (OpenTelemetry's
    does), or replaces it on one client, keeps seeing the load and record scripts, and a
    response callback set for them runs: the store then sends them through the client
    instead of on a connection of its own."""
    seen: list[str] = []
    real = redis.Redis.execute_command

    @functools.wraps(real)
    def traced(self: redis.Redis, *args: Any, **options: Any) -> Any:
        seen.append(args[0])
        return real(self, *args, **options)

    config = atlas.with_overrides(usage_log={"path": None})
    monkeypatch.setattr(redis.Redis, "execute_command", traced)
    with SessionManager(config, redis_url=real_redis_url) as mgr:
        mgr.record_turn("traced", user="goto shop", assistant="ok", tool_calls=[nav("shop")])
        mgr.build_messages("traced", "goto shop")
    assert len([name for name in seen if name in {"EVALSHA", "EVAL"}]) >= 2  # the record's script and the load's
    monkeypatch.undo()

    client, own = redis.Redis.from_url(real_redis_url), []

    def replaced(*args: Any, **options: Any) -> Any:
        own.append(args[0])
        return real(client, *args, **options)

    client.execute_command = replaced  # type: ignore[method-assign]
    with SessionManager(config, client=client) as mgr:
        mgr.record_turn("traced", user="goto home", assistant="ok", tool_calls=[nav("home")])
        mgr.build_messages("traced", "goto home")
    assert len([name for name in own if name in {"EVALSHA", "EVAL"}]) >= 2
    client.close()

    client, remade = redis.Redis.from_url(real_redis_url), []  # a reply the client remakes: its callback runs
    client.set_response_callback("EVALSHA", lambda reply, **options: remade.append(1) or reply)
    with SessionManager(config, client=client) as mgr:
        mgr.record_turn("traced", user="goto live", assistant="ok", tool_calls=[nav("live")])
        mgr.build_messages("traced", "goto live")
    assert len(remade) >= 2
    client.close()


def test_eight_threads_recording_into_one_session_lose_nothing(atlas: Config, real_redis_url: str) -> None:
    """8 threads x 100 turns into one session (one sync manager): the counter ends at 800, nothing raised."""
    errors: list[BaseException] = []
    with SessionManager(atlas.with_overrides(usage_log={"path": None}), redis_url=real_redis_url) as mgr:

        def work(worker: int) -> None:
            try:
                for i in range(100):
                    mgr.record_turn(
                        "shared",
                        user=f"w{worker} turn {i}",
                        assistant=f"done {worker}.{i}",
                        tool_calls=[nav(f"n{i}", ui=f"ui{worker}")],
                    )
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        check_shared_session(mgr.get_state("shared"), 800)


def check_shared_session(state: Any, turns: int) -> None:
    assert state.turns == turns
    assert len(state.summary) <= 3 and len(state.recent) == 2
    # The recent pair is one turn's user message and that same turn's reply.
    user, reply = state.recent[0]["content"], state.recent[1]["content"]
    worker, turn = user[1:].split(" turn ")
    assert reply == f"done {worker}.{turn}"
    assert state.context["userinterface_name"].startswith("ui")


def test_eight_tasks_recording_into_one_session_lose_nothing(atlas: Config, real_redis_url: str) -> None:
    """8 asyncio tasks x 100 turns into one session (one async manager): the counter ends at 800."""

    async def main() -> Any:
        async with AsyncSessionManager(atlas.with_overrides(usage_log={"path": None}), redis_url=real_redis_url) as mgr:

            async def work(worker: int) -> None:
                for i in range(100):
                    await mgr.record_turn(
                        "shared",
                        user=f"w{worker} turn {i}",
                        assistant=f"done {worker}.{i}",
                        tool_calls=[nav(f"n{i}", ui=f"ui{worker}")],
                    )

            await asyncio.gather(*(work(w) for w in range(8)))
            return await mgr.get_state("shared")

    check_shared_session(asyncio.run(main()), 800)


def test_store_repr_hides_the_password(atlas: Config) -> None:
    """The store's repr names the URL without its password."""
    store = RedisStore.from_url("redis://:hunter2@127.0.0.1:1/0", atlas.store)
    assert "hunter2" not in repr(store) and "***" in repr(store)
    store.close()


def test_index_lists_recently_updated_sessions(manager: Manager, raw: Any) -> None:
    """Each write puts the session in the listing index with its update time."""
    before = time.time()
    manager.record_turn("s-index", user="a", assistant="b")
    score = raw.zscore("mw:sessions", "s-index")
    assert score is not None and score >= before - 1


def test_a_session_expires_as_a_whole_after_its_idle_ttl(atlas: Config, managers: ManagerFactory, raw: Any) -> None:
    """With a 1 s TTL: a write keeps every key alive together; idle, all vanish together."""
    with managers(atlas.with_overrides(store={"ttl_seconds": 1})) as mgr:
        mgr.record_turn("short", user="a", assistant="b", tool_calls=[nav("x")])
        time.sleep(0.6)
        mgr.record_turn("short", user="c", assistant="d")  # no context key set: ctx must still be refreshed
        time.sleep(0.6)  # 1.2 s after the first write, 0.6 s after the last
        state = mgr.get_state("short")
        assert state.turns == 2 and state.context == {"userinterface_name": "google_tv"} and len(state.recent) == 2
        deadline = time.monotonic() + 3
        while any(raw.exists(k) for k in session_keys("mw", "short")) and time.monotonic() < deadline:
            time.sleep(0.05)
        remaining = [k for k in session_keys("mw", "short") if raw.exists(k)]
        assert remaining == []
        assert mgr.get_state("short").turns == 0
        assert mgr.list_sessions(search="short").entries == []  # the index forgets it too


# --- what the server refuses (issue: nothing lost, nothing leaked) --------------------------


@pytest.fixture
def limited_url(redis_server: RedisServer, real_redis_url: str) -> Iterator[str]:
    """An ACL user of the real server that may run every command but reach no key of ours."""
    admin = redis_server.client()
    admin.acl_setuser("limited", enabled=True, passwords=["+pw-limited"], keys=["other:*"], commands=["+@all"])
    yield f"redis://limited:pw-limited@127.0.0.1:{redis_server.port}/0"
    admin.acl_deluser("limited")


def test_a_server_refusal_is_an_error_not_an_empty_memory(redis_managers: ManagerFactory, limited_url: str) -> None:
    """NOPERM on the session's keys: every operation raises StoreError naming the refusal,
    never a prompt composed as if the session were empty."""
    mgr = redis_managers()
    mgr.record_turn("s", user="navigate to watchlist on google_tv", assistant="ok", tool_calls=[nav("watchlist")])
    with redis_managers(redis_url=limited_url) as limited:
        for call in (lambda: limited.build_messages("s", "goto shop"), lambda: limited.get_state("s"),
                     lambda: limited.notes("alice", "atlas"), lambda: limited.inspect("s")):  # fmt: skip
            with pytest.raises(StoreError, match="NoPermissionError: this user has no permissions"):
                call()


def test_store_errors_never_quote_the_failed_command(atlas: Config, redis_managers: ManagerFactory, limited_url: str) -> None:
    """A write the server refuses: the error and the degrade-mode warning name the refusal,
    not the command, whose arguments carry the message text."""
    secret = "my card number is 4111 1111 1111 1111"
    with redis_managers(redis_url=limited_url) as limited:
        with pytest.raises(StoreError) as info:
            limited.record_turn("s", user=secret, assistant="noted")
    message = str(info.value)
    assert "no permissions" in message and "Command #" not in message and "4111" not in message
    config = atlas.with_overrides(store={"on_store_error": "degrade"}, usage_log={"path": None})
    with redis_managers(config, redis_url=limited_url) as degraded, capture_events() as events:
        assert degraded.record_turn("s", user=secret, assistant="noted") == 0
    assert events and not any("4111" in str(event) or "Command #" in str(event) for event in events)


# Every command the record script runs (record.lua), each denied in turn below.
_RECORD_COMMANDS = ("hincrby", "hset", "hsetnx", "hdel", "hget", "hgetall", "hkeys", "hmget", "hrandfield", "zadd",
                    "zrem", "zrange", "zrevrange", "zrangebyscore", "zremrangebyrank", "zscore", "rpush", "ltrim",
                    "set", "unlink", "del", "pexpire", "persist")  # fmt: skip


def _snapshot(client: Any) -> dict[bytes, bytes | None]:
    return {key: client.dump(key) for key in sorted(client.keys("mw:*"))}


@pytest.mark.slow
@pytest.mark.parametrize("archive_turns,ttl", [(1, 3600), (0, 0)])
def test_a_turn_is_written_whole_or_not_at_all_whatever_command_the_acl_denies(
    atlas: Config, redis_server: RedisServer, archive_turns: int, ttl: int
) -> None:
    """The record script checks, before it writes, the commands the turn will run: with any
    one of its commands denied, a turn either is recorded, as the next turn, or fails
    leaving every key as it was (an archive that drops a turn, expiry set or removed, the
    tool window). Found: a read of the counter the checks left out, refused, was taken for
    a missing counter, rebuilt and reported repaired."""
    admin = redis_server.client()
    admin.flushdb()
    url = f"redis://denied:pw-denied@127.0.0.1:{redis_server.port}/0"
    config = atlas.with_overrides(
        memory={"archive_turns": archive_turns},
        store={"url": f"redis://127.0.0.1:{redis_server.port}/0", "ttl_seconds": ttl},
        usage_log={"path": None},
    )
    turn = {"user": "navigate to watchlist on google_tv", "assistant": "done",
            "tool_calls": [ToolCall(name="navigate_to_node", arguments={"node": "watchlist"}, ok=True)]}  # fmt: skip
    with SessionManager(config) as mgr:
        for _ in range(2):
            mgr.record_turn("acl", **turn)  # type: ignore[arg-type]
    refused, meta = [], session_keys("mw", "acl").meta
    try:
        for command in _RECORD_COMMANDS:
            admin.acl_setuser("denied", reset=True, enabled=True, passwords=["+pw-denied"], keys=["*"],
                              commands=["+@all", f"-{command}"])  # fmt: skip
            before, turns = _snapshot(admin), int(admin.hget(meta, "turns") or 0)
            with SessionManager(config.with_overrides(store={"url": url})) as denied, capture_events() as events:
                try:
                    recorded = denied.record_turn("acl", **turn)  # type: ignore[arg-type]
                except StoreError as error:
                    assert f"may not run {command.upper()}" in str(error) or "can't run this command" in str(error)
                    assert _snapshot(admin) == before, command
                    refused.append(command)
                else:  # as the next turn, nothing taken for corrupt
                    assert recorded == turns + 1 == int(admin.hget(meta, "turns") or 0), command
                    assert not [e for e in events if e["event"] == "store.repaired"], command
    finally:
        admin.acl_deluser("denied")
    assert {"hincrby", "rpush", "zadd", "pexpire" if ttl else "persist"} <= set(refused)
    assert ("hrandfield" in refused) == bool(archive_turns) and ("unlink" in refused) == (not archive_turns)


def test_a_turn_with_thousands_of_terms_is_indexed_as_turns_leave_the_archive(atlas: Config, redis_server: RedisServer) -> None:
    """The store takes any turn update: pieces holding thousands of terms (more than the core
    makes today: a piece's terms are capped) are archived and indexed as turns leave the
    archive. Found in review: a turn's terms and those of the turns leaving the archive went
    to the index in one command, past what Lua's unpack takes (about 8,000 arguments), and
    the script stopped with the turn's pieces archived but not indexed."""
    redis_server.client().flushdb()
    config = atlas.with_overrides(memory={"archive_turns": 2}, store={"url": redis_server.url}, usage_log={"path": None})
    layout, keys = Layout.of(config), session_keys("mw", "wide")
    first, second = (tuple(f"w{n:05d}y" for n in range(start, start + 2_000)) for start in (0, 10_000))
    store = RedisStore.from_url(redis_server.url, config.store)
    try:
        for words in (first, first, second):  # the third turn's terms go in as the first turn's leave
            update = apply_turn(Turn(user="many words", assistant="noted"), config)
            update = dataclasses.replace(update, pieces=(Piece("user", "many words", words, 3),))
            store.execute(record(layout, "wide", update, now=time.time()))
    finally:
        store.close()
    raw = redis_server.client()
    assert int(raw.hget(keys.meta, "turns")) == 3
    assert {turn.split(b".")[0] for turn in raw.hkeys(keys.arc)} == {b"2", b"3"}
    assert raw.hget(keys.idx, second[0]) == b"3.0" and raw.hget(keys.idx, first[0]) == b"2.0"
    assert raw.hlen(keys.idx) == 2 * 2_000 + 2  # the two turns' terms and their entries, no more


def test_a_corrupt_counter_is_repaired_field_by_field(managers: ManagerFactory, raw: Any) -> None:
    """A meta field that holds no number: the next turn rewrites that field only; the
    session's owner and its other fields stay."""
    mgr = managers()
    sid = mgr.resolve_session("alice", "atlas")
    mgr.record_turn(sid, user="first", assistant="ok")
    meta = session_keys("mw", sid).meta
    raw.hset(meta, "turns", "abc")
    with capture_events() as events:
        assert mgr.record_turn(sid, user="second", assistant="ok") == 2  # counted on from the last turn the ids hold
    state = mgr.get_state(sid)
    assert state.owner == ("alice", "atlas") and state.created_at is not None and state.full_tokens > 0
    assert [e["keys"] for e in events if e["event"] == "store.repaired"] == [[f"{meta} turns"]]


def test_every_driver_runs_a_whole_plan_with_execute(manager: Manager) -> None:
    """``store.execute(plan)`` (the storage contract a user's own code may call) runs a
    plan to its result on the face's driver; a sync store behind a worker thread too."""
    from middleware.store import ThreadedStore
    from middleware.store.keys import Layout
    from middleware.store.load import load
    from middleware.store.sessions import ping

    manager.record_turn("s", user="go to shop", assistant="at shop", tool_calls=[nav("shop")])
    layout = Layout.of(manager.config)
    store = manager.store
    if isinstance(manager, SessionManager):
        loaded = store.execute(load(layout, "s"))
        threaded = ThreadedStore(store)
        assert asyncio.run(threaded.execute(ping(layout))) is True
        assert repr(threaded) == repr(store)
    else:
        loaded = manager._wait(store.execute(load(layout, "s")))
    assert loaded.state.turns == 1 and loaded.state.context == {"userinterface_name": "google_tv"}


def test_tools_called_are_remembered_in_the_order_first_sent_while_in_use(
    atlas: Config, managers: ManagerFactory, raw: Any
) -> None:
    """Each turn's tools are kept in the meta hash: the order a tool was first sent stays
    while it is called within disclosure.recent_turns turns; past that it is dropped, and a
    tool called again later goes to the end."""
    mgr = managers(atlas.with_overrides(disclosure={"recent_turns": 2}))
    calls = [nav("a"), ToolCall(name="take_control", arguments={"device_id": "d1"}), nav("b")]
    mgr.record_turn("s", user="one", assistant="ok", tool_calls=calls)
    assert mgr.get_state("s").tool_uses == {"navigate_to_node": (1001, 1), "take_control": (1002, 1)}
    mgr.record_turn("s", user="two", assistant="ok", tool_calls=[ToolCall(name="click_element")])
    mgr.record_turn("s", user="three", assistant="ok", tool_calls=[nav("c")])
    # take_control (last called in turn 1) is two turns old: gone; navigate_to_node keeps its order.
    assert mgr.get_state("s").tool_uses == {"navigate_to_node": (1001, 3), "click_element": (2001, 2)}
    for turn in range(4, 7):
        mgr.record_turn("s", user=f"turn {turn}", assistant="ok")
    assert mgr.get_state("s").tool_uses == {}
    mgr.record_turn("s", user="seven", assistant="ok", tool_calls=[nav("d")])
    assert mgr.get_state("s").tool_uses == {"navigate_to_node": (7001, 7)}
    fields = {k for k in raw.hkeys(session_keys("mw", "s").meta) if k.startswith(b"t:")}
    assert fields == {b"t:navigate_to_node"}


def test_tools_are_not_remembered_when_disclosure_keeps_none(atlas: Config, managers: ManagerFactory) -> None:
    """recent_turns 0 (or disclosure off) stores no tool names at all."""
    for overrides in ({"recent_turns": 0}, {"enabled": False}):
        mgr = managers(atlas.with_overrides(disclosure=overrides))
        mgr.record_turn("s", user="one", assistant="ok", tool_calls=[nav("a")])
        assert mgr.get_state("s").tool_uses == {}


def test_a_corrupt_tool_field_is_skipped_with_a_warning(manager: Manager, raw: Any) -> None:
    """A ``t:`` field that is not '<order> <turn>' is left out of the state and named."""
    manager.record_turn("s", user="one", assistant="ok", tool_calls=[nav("a")])
    raw.hset(session_keys("mw", "s").meta, "t:bogus", "not numbers")
    with capture_events() as events:
        assert manager.get_state("s").tool_uses == {"navigate_to_node": (1001, 1)}
    assert any(e["event"] == "store.corrupt_record" and "t:bogus" in e["reason"] for e in events)


def test_a_load_for_a_young_session_reads_its_turn_records_in_the_same_round_trip(
    atlas: Config, real_redis_url: str, redis_server: RedisServer
) -> None:
    """With ``traces``, the load script also reads the turn records (resend_history) of a
    session young enough to resend them, in its one round trip; not once the session is
    marked composed, nor past traces.max_entries turns."""
    from middleware.store.keys import Layout
    from middleware.store.load import load

    with SessionManager(atlas.with_overrides(usage_log={"path": None}), redis_url=real_redis_url) as mgr:
        layout, store, sid = Layout.of(mgr.config), mgr.store, uuid.uuid4().hex
        for i in range(2):
            mgr.record_turn(sid, user=f"goto shop {i}", assistant="ok", tool_calls=[nav("shop")])
        query = [("shop", 1.0)]
        store.execute(load(layout, sid, query=query))  # the server learns the load script
        admin = redis_server.client()
        found: list[Any] = []
        assert round_trips(admin, lambda: found.append(store.execute(load(layout, sid, query=query, traces=True)))) == 1
        assert found[0].traces is not None and len(found[0].traces) == 2
        assert store.execute(load(layout, sid, query=query)).traces is None  # not asked
        young = dataclasses.replace(layout, trace_entries=1)  # two turns: past the traces kept
        assert store.execute(load(young, sid, query=query, traces=True)).traces is None
        admin.hset(layout.session(sid).meta, "composed", "1")
        assert store.execute(load(layout, sid, query=query, traces=True)).traces is None


PACKED_ARGS = ("EVALSHA", "ab" * 20, 2, "mw:{s}:ctx", "mw:{s}:meta", "héllo wörld", b"\x00\xffraw", -7, 0, 3.0, 0.1, 1e-05, "")


def test_a_packed_script_is_the_bytes_redis_py_would_send() -> None:
    """The store packs a script's command itself, as redis-py's own encoder and packer would:
    text in the connection's encoding, numbers by repr, bytes as they are."""
    from redis.connection import Encoder, PythonRespSerializer

    from middleware.store.packing import packed

    for encoding in ("utf-8", "latin-1"):
        theirs = PythonRespSerializer(6000, Encoder(encoding, "strict", False).encode).pack(*PACKED_ARGS)
        ours = packed(PACKED_ARGS, encoding)
        assert ours is not None and b"".join(ours) == b"".join(theirs)
    assert b"".join(packed(PACKED_ARGS) or []) != b"".join(packed(PACKED_ARGS, "latin-1") or [])  # the encoding is used


@pytest.mark.parametrize("odd", [True, memoryview(b"x"), bytearray(b"x"), type("Text", (str,), {})("x"), None, 2**70 * 1.0j])
def test_an_argument_of_another_kind_is_left_to_redis_py(odd: Any) -> None:
    """A bool (which redis-py refuses with its own error), a memoryview, a subclass, anything
    else: None, so redis-py packs the command as it always did."""
    from middleware.store.packing import packed

    assert packed(("EVALSHA", "sha", 0, odd)) is None


def test_without_hiredis_redis_py_packs_the_scripts(atlas: Config, real_redis_url: str, monkeypatch: Any) -> None:
    """Where hiredis is not installed the store leaves packing to redis-py: a turn records and
    loads the same on a real server either way."""
    import middleware.store.packing as packing

    config = atlas.with_overrides(usage_log={"path": None})
    sent: list[Any] = []
    real = redis.connection.AbstractConnection.send_command

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        sent.append(args[0])
        real(self, *args, **kwargs)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_command", counted)
    prompts = []
    for pack in (packing._PACK, None):
        monkeypatch.setattr(packing, "_PACK", pack)
        with SessionManager(config, redis_url=real_redis_url) as mgr:
            session = f"packed-{pack is not None}"
            mgr.record_turn(session, user="goto shop", assistant="ok", tool_calls=[nav("shop")])
            mgr.record_turn(session, user="goto home", assistant="ok", tool_calls=[nav("home")])
            prompts.append(mgr.build_messages(session, "goto shop again"))
        if pack is not None:
            assert "EVALSHA" not in sent  # hiredis is installed here: the store packed its scripts
    assert "EVALSHA" in sent  # then redis-py did
    assert prompts[0] == prompts[1]
