"""Turns that span requests (middleware.core.live): reading a request's messages, the open turn,
and the script that records finished turns in arrival order, on the embedded store and real Redis."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import pytest

from middleware import Config, SessionManager
from middleware.core.composer import Composer
from middleware.core.conversation import OpenTurn, read_messages
from middleware.core.state import Turn
from middleware.exceptions import InvalidMessageError, InvalidToolCallError
from middleware.runner import run
from middleware.store import RedisStore, live
from middleware.store import keys as store_keys
from middleware.store import load as store_load
from middleware.store import record as store_record
from middleware.tokens import get_tokenizer


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def said(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def asks(*ids: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids]}  # fmt: skip


def result(call: str, text: str = "ok") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call, "content": text}


def test_the_turn_in_progress_is_what_follows_the_last_user_message() -> None:
    """A whole history reads as: the client's system text, whole earlier turns, the current
    user message, and its tool loop so far."""
    conversation = read_messages([{"role": "system", "content": "be brief"}, user("a"), said("b"), user("c"), asks("x"),
                                  said("ignored"), user("d"), asks("1", "2"), result("1"), result("2")])  # fmt: skip
    assert conversation.system == "be brief" and conversation.user == "d"
    assert [m["role"] for m in conversation.tail] == ["assistant", "tool", "tool"]
    assert conversation.waiting == ("1", "2")
    assert [[m["content"] for m in turn] for turn in conversation.earlier] == [["a", "b"], ["c", None, "ignored"]]


@pytest.mark.parametrize(
    ("messages", "user_text", "waiting"),
    [
        ([user("hi")], "hi", ()),
        ([result("1")], None, ("1",)),
        ([asks("1"), result("1")], None, ("1",)),
        ([{"role": "developer", "content": "x"}, {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url"}]}],
         "look", ()),
    ],
    ids=["new message", "tool results only", "tool call and results", "parts"],
)  # fmt: skip
def test_new_message_clients_are_read_too(
    messages: list[dict[str, Any]], user_text: str | None, waiting: tuple[str, ...]
) -> None:
    """A client sending only what is new: a user message, or just the tool results."""
    conversation = read_messages(messages)
    assert (conversation.user, conversation.waiting) == (user_text, waiting)


@pytest.mark.parametrize(
    ("messages", "says"),
    [
        ("nope", "'messages' has a str; expected a non-empty array of messages"),
        ([], "'messages' is an empty array; expected a non-empty array of messages"),
        ([user("x"), 3], "messages[1] has a int"),
        ([{"role": "wizard", "content": "secret words"}], "messages[0].role has value 'wizard'"),
        ([{"role": "user", "content": 5}], "messages[0].content has a int"),
        ([{"role": "tool", "content": "x"}], "messages[0] is a tool result without a 'tool_call_id'"),
        ([user("x"), said("y")], "The last message is an assistant message"),
        ([{"role": "system", "content": "only"}], "holds no user message and no tool results"),
    ],
)
def test_bad_messages_are_named_by_index_and_field(messages: Any, says: str) -> None:
    """Errors name the message and field, never the content."""
    with pytest.raises(InvalidMessageError) as caught:
        read_messages(messages)
    assert says in str(caught.value) and "secret words" not in str(caught.value)


def test_a_tool_call_without_an_id_is_refused() -> None:
    with pytest.raises(InvalidToolCallError, match=r"messages\[1\].tool_calls\[0\] needs an 'id'"):
        read_messages([user("x"), {"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}, result("1")])


def test_an_open_turn_takes_only_the_results_it_waits_for() -> None:
    """Results are matched to the pending calls by id, in the calls' order; a missing one is an error."""
    turn = asked(OpenTurn(seq=3, turn_id="t", user="u"), "a", "b")
    assert turn.pending == ("a", "b") and turn.field == "open:a" and turn.steps == 1
    answered = turn.answered([result("b", "B"), result("zzz"), result("a", "A")])
    assert [m.get("tool_call_id") for m in answered.loop] == [None, "a", "b"] and answered.pending == ()
    with pytest.raises(InvalidMessageError, match="No tool result for call 'b'"):
        turn.answered([result("a")])
    assert OpenTurn.from_json(answered.to_json()) == answered
    assert OpenTurn.from_json(b"not json") is None


def test_a_queued_turn_keeps_the_record_script_arguments() -> None:
    """A finished turn queued by finish.lua carries record.lua's ARGV as text (JSON strings), in RecordArguments' order."""
    config = Config()
    layout = store_keys.Layout.of(config)
    composer = Composer(config, get_tokenizer("gpt-4o-mini"))
    update = composer.apply_turn(Turn(user="go", assistant="done", tool_calls=()), turn_id="t1", prompt="{}")
    record = store_record.record_arguments(layout, "s", update, now=1.5)
    batch = next(live.finish(layout, "s", 7, record, drop=None, now=2.0, wait=30, epoch="e1"))
    (script,) = batch.commands
    *_, seq, entry, drop, epoch = script
    arguments = json.loads(entry)
    assert (seq, drop, epoch) == (7, "", "e1") and arguments[:2] == ["t1", "1.5"] and all(isinstance(a, str) for a in arguments)
    assert arguments == [a.decode() if isinstance(a, bytes) else str(a) for a in record.argv()]


# --- the ordering script, on the store ------------------------------------------------------------


@pytest.fixture
def store(store_url: str) -> Any:
    config = Config().with_overrides(store={"url": store_url})
    driver = RedisStore.from_url(store_url, config.store)
    yield config, driver
    driver.close()


def asked(turn: OpenTurn, *ids: str) -> OpenTurn:
    """``turn`` after the model asked for tools ``ids``, one more call made."""
    return dataclasses.replace(turn, loop=(*turn.loop, asks(*ids)), steps=turn.steps + 1)


def arrive(
    config: Config, driver: RedisStore, *, waiting: tuple[str, ...] = (), wait: float = 3600, reserve: bool | None = None
) -> live.Arrival:
    """A request arriving, its arrival sent ahead of the session's load in one round trip
    (``reserve``: whether it brings a user message, by default when it answers no call)."""
    layout = store_keys.Layout.of(config)
    reserve = not waiting if reserve is None else reserve
    command = live.arrive_command(layout, "s", waiting=waiting, reserve=reserve, mark_import=True, now=time.time(), wait=wait)
    loaded = run(store_load.load(layout, "s", ahead=[command]), driver.send)
    return live.arrival(loaded.ahead[0])


def finish(config: Config, driver: RedisStore, seq: int, text: str, *, wait: float = 3600, epoch: str = "") -> bool:
    """Finish turn ``seq`` (of incarnation ``epoch``; "": not told) saying ``text``; whether
    it was applied (False: queued)."""
    layout = store_keys.Layout.of(config)
    composer = Composer(config, get_tokenizer("gpt-4o-mini"))
    update = composer.apply_turn(Turn(user=text, assistant=f"re {text}"), turn_id=text)
    record = store_record.record_arguments(layout, "s", update, now=time.time())
    return run(live.finish(layout, "s", seq, record, drop=None, now=time.time(), wait=wait, epoch=epoch), driver.send)


def catch_up(config: Config, driver: RedisStore, seq: int, *, now: float | None = None, epoch: str = "") -> bool:
    """Flush for turn ``seq``: whether it is applied (or nothing is left to follow)."""
    layout = store_keys.Layout.of(config)
    done, applied = run(live.catch_up(layout, "s", seq, now=now or time.time(), wait=3600, epoch=epoch), driver.send)
    assert applied >= seq if done and applied else applied < seq
    return done


def recorded(config: Config, url: str) -> list[str]:
    with SessionManager(config.with_overrides(summary={"lines": 20, "cover_recent": True})) as mgr:
        return [line.split(" → ")[0].removeprefix("• ") for line in mgr.get_state("s").summary]


def test_finished_turns_are_recorded_in_arrival_order(store: Any, store_url: str) -> None:
    """Turns finishing out of order wait for the ones that arrived before them."""
    config, driver = store
    seqs = [arrive(config, driver).seq for _ in range(3)]
    assert seqs == [1, 2, 3]
    assert not finish(config, driver, 3, "third")
    assert not finish(config, driver, 2, "second")
    assert recorded(config, store_url) == []  # both wait for the first
    assert finish(config, driver, 1, "first")
    assert recorded(config, store_url) == ["first", "second", "third"]


def test_a_queued_turn_is_applied_by_its_own_catch_up_once_the_lease_ahead_lapses(store: Any, store_url: str) -> None:
    """A turn queued behind one whose process died needs no later request: flushing again for
    it (as its process does) applies it once the lease ahead lapsed, and says so."""
    config, driver = store
    first, second = arrive(config, driver).seq, arrive(config, driver).seq
    assert not finish(config, driver, second, "second")
    assert not catch_up(config, driver, second)  # the first's lease still holds the line
    assert recorded(config, store_url) == []
    assert catch_up(config, driver, second, now=time.time() + live.LEASE_SECONDS + 0.1)
    assert recorded(config, store_url) == ["second"]
    assert finish(config, driver, first, "late first")  # passed over, still recorded when it ends
    assert recorded(config, store_url) == ["second", "late first"]
    third = arrive(config, driver).seq
    with SessionManager(config) as mgr:
        mgr.reset("s")
    assert catch_up(config, driver, second)  # a session gone has nothing left to wait for
    assert finish(config, driver, third, "from before the reset")  # its place is gone with the session: dropped
    assert not driver.client.exists(store_keys.Layout.of(config).session("s").live)
    arrive(config, driver)
    assert finish(config, driver, 1, "after the reset")
    assert recorded(config, store_url) == ["after the reset"]


def test_a_turn_from_before_a_reset_stays_out_of_the_new_session_whatever_its_place(store: Any, store_url: str) -> None:
    """Each incarnation of the live hash has an epoch: a turn that arrived before a reset is
    dropped when it finishes, renews no lease and stops following, even once the new session
    has given out its place number again; the new session's own turns go on as before."""
    config, driver = store
    layout = store_keys.Layout.of(config)
    old = [arrive(config, driver) for _ in range(2)]
    assert old[0].epoch == old[1].epoch and len(old[0].epoch) == 16
    assert finish(config, driver, old[0].seq, "old first", epoch=old[0].epoch)
    with SessionManager(config) as mgr:
        mgr.reset("s")
    new = [arrive(config, driver) for _ in range(2)]
    assert [a.seq for a in new] == [1, 2] and new[0].epoch != old[1].epoch  # place 2 given out again
    assert not run(live.renew(layout, "s", 2, now=time.time(), epoch=old[1].epoch), driver.send)
    assert run(live.renew(layout, "s", 2, now=time.time(), epoch=new[1].epoch), driver.send)
    assert finish(config, driver, old[1].seq, "old second", epoch=old[1].epoch)  # dropped, not queued
    assert catch_up(config, driver, old[1].seq, epoch=old[1].epoch)  # nothing to follow
    assert not finish(config, driver, new[1].seq, "new second", epoch=new[1].epoch)  # waits for new first
    assert finish(config, driver, new[0].seq, "new first", epoch=new[0].epoch)
    assert recorded(config, store_url) == ["new first", "new second"]
    # A turn that waits for the client's tool results keeps its epoch: one written into the
    # hash after a reset is no turn of the new session. A request that answers its calls with
    # a user message of its own (a client sending its whole history) takes a place; the
    # stale field is forgotten.
    turn = asked(OpenTurn(seq=0, turn_id="t", user="u", epoch=old[0].epoch), "c1")
    run(live.wait_for_results(layout, "s", turn, drop=None, now=time.time(), wait=3600, epoch=old[0].epoch), driver.send)
    assert OpenTurn.from_json(turn.to_json()) == turn
    found = arrive(config, driver, waiting=("c1",), reserve=True)
    assert found.open is None and found.seq == 3
    assert not driver.client.hexists(layout.session("s").live, "open:c1")
    assert finish(config, driver, found.seq, "whole history", epoch=found.epoch)
    assert recorded(config, store_url) == ["new first", "new second", "whole history"]
    # One of this incarnation, or of one that did not say, is continued.
    for epoch in (found.epoch, ""):
        run(live.wait_for_results(layout, "s", dataclasses.replace(turn, epoch=epoch), drop=None, now=time.time(), wait=3600,
                                  epoch=found.epoch), driver.send)  # fmt: skip
        assert arrive(config, driver, waiting=("c1",)).open == dataclasses.replace(turn, epoch=epoch)
    from middleware.serve.turns import Turns

    stale = found._replace(open=turn)  # and should one reach the endpoint, it is not continued
    results = read_messages([{"role": "tool", "tool_call_id": "c1", "content": "done"}])
    with pytest.raises(InvalidMessageError, match="not waiting for"):
        Turns._turn(Turns.__new__(Turns), results, stale, None)
    same = found._replace(open=dataclasses.replace(turn, epoch=found.epoch))
    assert Turns._turn(Turns.__new__(Turns), results, same, None)[0].turn_id == "t"


def test_a_turn_that_never_finishes_holds_the_line_only_so_long(store: Any, store_url: str) -> None:
    """With a zero wait, a missing turn is passed over at once; if it finishes later it is still recorded, once."""
    config, driver = store
    first, second = arrive(config, driver).seq, arrive(config, driver).seq
    finish(config, driver, second, "second", wait=0)
    assert recorded(config, store_url) == ["second"]
    finish(config, driver, first, "late first", wait=0)
    assert recorded(config, store_url) == ["second", "late first"]
    with SessionManager(config) as mgr:
        assert mgr.get_state("s").turns == 2


def test_giving_a_place_up_lets_the_next_turn_through(store: Any, store_url: str) -> None:
    """A turn whose upstream call failed gives its place up (no commands): the next is recorded at once."""
    config, driver = store
    first, second = arrive(config, driver).seq, arrive(config, driver).seq
    finish(config, driver, second, "second")
    layout = store_keys.Layout.of(config)
    run(live.finish(layout, "s", first, None, drop=None, now=time.time(), wait=3600, epoch=""), driver.send)
    assert recorded(config, store_url) == ["second"]


def test_the_first_arrival_may_import_and_an_open_turn_is_found_by_its_call_ids(store: Any) -> None:
    """Only the first request may import history; a waiting turn is found by any id of its pending calls."""
    config, driver = store
    assert arrive(config, driver).first and not arrive(config, driver).first
    layout = store_keys.Layout.of(config)
    turn = asked(OpenTurn(seq=0, turn_id="t", user="u"), "c1", "c2")
    run(live.wait_for_results(layout, "s", turn, drop=None, now=time.time(), wait=3600, epoch=""), driver.send)
    found = arrive(config, driver, waiting=("zz", "c1"))
    assert found.open == turn and found.seq == 0  # no new place for a continued turn
    with SessionManager(config) as mgr:
        mgr.reset("s")  # the live hash goes with the session
    assert arrive(config, driver, waiting=("c1",)).open is None


def test_a_turn_waiting_for_tool_results_lets_later_turns_through(store: Any, store_url: str) -> None:
    """Waiting for the client's tools gives the turn's place up: a later turn is recorded at once,
    and the tool turn when its results come."""
    config, driver = store
    layout = store_keys.Layout.of(config)
    first, second = arrive(config, driver).seq, arrive(config, driver).seq
    turn = asked(OpenTurn(seq=first, turn_id="t", user="tools"), "c1")
    waiting = run(live.wait_for_results(layout, "s", turn, drop=None, now=time.time(), wait=3600, epoch=""), driver.send)
    assert waiting.seq == 0
    finish(config, driver, second, "second")
    assert recorded(config, store_url) == ["second"]
    finish(config, driver, waiting.seq, "tools")
    assert recorded(config, store_url) == ["second", "tools"]


def test_commands_sent_ahead_of_a_load_go_in_its_round_trip(store: Any) -> None:
    """One round trip for both: the commands go first and their replies come back with the state."""
    config, driver = store
    layout = store_keys.Layout.of(config)
    plan = store_load.load(layout, "s", ahead=[("incr", "n"), ("incr", "n")])
    batch = next(plan)
    assert [c[0] for c in batch.commands[:2]] == ["incr", "incr"] and len(batch.commands) > 2
    loaded = run(store_load.load(layout, "s", ahead=[("incr", "n")]), driver.send)
    assert loaded.ahead == (1,) and loaded.state.turns == 0


def test_a_follower_goes_on_while_the_line_moves_and_stops_once_it_stands(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each turn ahead may hold the line up to the wait: a follower whose wait ran out while
    the turns ahead were passed over one by one keeps flushing, and gives up (to the
    session's next request) only once no turn was applied for a whole wait and lease."""
    import asyncio
    import types

    from middleware.serve import session as serve_session

    # A clock of the test's own, moved on only by the follower's sleeps: a flush every 0.25 s
    # (a quarter lease), patience 1 s (the wait, 0, and the lease), whatever the machine's load.
    clock, pause = [0.0], asyncio.sleep

    async def sleep(seconds: float) -> None:
        clock[0] += seconds
        await pause(0)

    monkeypatch.setattr(serve_session, "LEASE_SECONDS", 1.0)
    monkeypatch.setattr(serve_session, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(asyncio, "sleep", sleep)

    class Line:
        """catch_up's replies: the place applied moves on every ``every`` flushes, up to ``to``."""

        wait = 0.0

        def __init__(self, every: int, to: int, seq: int) -> None:
            self.every, self.to, self.seq, self.calls = every, to, seq, 0

        def catch_up(self, exchange: Any) -> Any:
            self.calls += 1
            applied = min(self.calls // self.every, self.to)
            yield from ()
            return applied >= self.seq, applied

    async def follow(line: Line) -> int:
        async def run(program: Any) -> Any:
            try:
                next(program)
            except StopIteration as stop:
                return stop.value
            raise AssertionError("catch_up sends nothing here")

        clock[0] = 0.0
        requests = serve_session.SessionRequests(run)
        requests.follow(line, dataclasses.replace(_queued(), queued=True))  # type: ignore[arg-type]
        while requests.tasks:
            await asyncio.gather(*requests.tasks)
        return line.calls

    # A turn ahead applied every 2 flushes (0.5 s, as each may hold the line up to the 1 s of
    # wait and lease): followed to the end, 2.5 s, where a fixed deadline stopped after 1 s
    # (5 flushes).
    assert asyncio.run(follow(Line(every=2, to=5, seq=5))) == 10
    # The line stands at 2 from the 4th flush (1 s): the follower flushes until 1 s after
    # that, then once more, and stops.
    assert asyncio.run(follow(Line(every=2, to=2, seq=5))) == 9


def _queued() -> Any:
    from middleware.serve.turns import Exchange

    return Exchange(session_id="s", turn=OpenTurn(seq=5, turn_id="t", user="u"), calls=None, drop=None)  # type: ignore[arg-type]
