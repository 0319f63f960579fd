"""The OpenAI Agents SDK session, run through the real ``Runner`` with a scripted model served
through litellm (the SDK's own ``LitellmModel``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from middleware import AsyncSessionManager, Config
from tests.adapter_models import MODEL, SEEN, get_weather

agents = pytest.importorskip("agents")
from agents import Agent, Runner, function_tool, set_tracing_disabled  # noqa: E402
from agents.extensions.models.litellm_model import LitellmModel  # noqa: E402

from middleware.adapters.agents import MiddlewareSession, chat_message  # noqa: E402

set_tracing_disabled(True)


def agent() -> Any:
    return Agent(name="weather", instructions="Be brief.", model=LitellmModel(model=MODEL), tools=[function_tool(get_weather)])


@pytest.fixture
def manager(store_url: str) -> Any:
    return AsyncSessionManager(Config().with_overrides(store={"url": store_url}, usage_log={"path": None}))


def test_a_run_records_its_turn_and_the_next_run_gets_the_composed_memory(manager: AsyncSessionManager) -> None:
    """Runner.run with the session: the tool call is recorded as in chat(); the next run's model
    is sent the agent's instructions, the memory and the current input, not the earlier items."""

    async def scenario() -> Any:
        session = MiddlewareSession("a1", manager)
        first = await Runner.run(agent(), "weather in Paris?", session=session)
        for text in ("thanks", "and now?"):
            await Runner.run(agent(), text, session=session)
        state = await manager.get_state("a1")
        items = await session.get_items()
        await manager.close()
        return first.final_output, state, items

    final, state, items = asyncio.run(scenario())
    assert final == "clear in Paris"
    assert state.turns == 3 and state.context == {"city": "Paris"}
    assert state.summary == ['• weather in Paris? → get_weather: "Paris", "clear"', "• thanks → ok: thanks"]
    sent = SEEN[-1]
    assert sent[0] == {"role": "system", "content": "Be brief."}
    assert sent[1]["role"] == "system" and "- city: Paris" in sent[1]["content"]
    assert sent[2]["content"].startswith("[Previous conversation summary]")
    assert [m["content"] for m in sent[-3:]] == ["thanks", "ok: thanks", "and now?"]
    assert not any(m.get("tool_calls") for m in sent)  # earlier tool calls are not resent
    assert [i["role"] for i in items] == ["system", "user", "assistant", "user", "assistant"]


def test_get_items_honours_limit_and_clear_session_forgets(manager: AsyncSessionManager) -> None:
    """get_items(limit) gives the latest items; clear_session empties the store for the session."""

    async def scenario() -> tuple[list[Any], list[Any], int]:
        session = MiddlewareSession("a2", manager)
        await session.add_items([{"role": "user", "content": "hi"}, {"type": "message", "role": "assistant",
                                 "content": [{"type": "output_text", "text": "hello"}]}])  # fmt: skip
        latest = await session.get_items(limit=1)
        await session.clear_session()
        after = await session.get_items()
        turns = (await manager.get_state("a2")).turns
        await manager.close()
        return latest, after, turns

    latest, after, turns = asyncio.run(scenario())
    assert latest == [{"role": "assistant", "content": "hello"}] and after == [] and turns == 0


def test_items_of_an_unfinished_turn_wait_and_can_be_popped(manager: AsyncSessionManager) -> None:
    """A turn is recorded only once whole; until then its items are returned after the memory and pop_item takes them back."""

    async def scenario() -> tuple[Any, Any, int, int]:
        session = MiddlewareSession("a3", manager)
        call = {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Oslo"}'}
        await session.add_items([{"role": "user", "content": "weather in Oslo?"}, call])
        waiting = (await manager.get_state("a3")).turns
        popped = await session.pop_item()
        await session.add_items([call, {"type": "function_call_output", "call_id": "c1", "output": '{"sky": "snow"}'},
                                 {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "snow"}]}])  # fmt: skip
        state = await manager.get_state("a3")
        empty = await session.pop_item()
        await manager.close()
        return popped, empty, waiting, state.turns if state.context == {"city": "Oslo"} else -1

    popped, empty, waiting, turns = asyncio.run(scenario())
    assert popped["type"] == "function_call" and empty is None
    assert (waiting, turns) == (0, 1)


def reply(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


def test_a_bad_item_or_turn_never_blocks_the_session_or_records_a_turn_twice(manager: AsyncSessionManager) -> None:
    """Found: an item that could not be read stayed pending and every later add_items raised;
    a turn past the limits raised after the turns before it were recorded, and each later call
    recorded those again. Now a bad item is refused before any is kept, an unrecordable turn
    is dropped (its error raised), and each turn is recorded once."""
    from middleware.exceptions import InvalidMessageError

    async def scenario() -> tuple[Any, Any]:
        session = MiddlewareSession("a-bad", manager)
        with pytest.raises(InvalidMessageError):
            await session.add_items([{"role": "user", "content": ["not", "parts"]}])
        await session.add_items([{"role": "user", "content": "turn one"}, reply("reply one")])
        with pytest.raises(InvalidMessageError, match="limit is 200,000"):
            await session.add_items([{"role": "user", "content": "turn two"}, reply("reply two"),
                                     {"role": "user", "content": "x" * 300_000}, reply("reply three")])  # fmt: skip
        await session.add_items([{"role": "user", "content": "turn four"}, reply("reply four")])
        state = await manager.get_state("a-bad")
        pending = await session.pop_item()
        await manager.close()
        return state, pending

    state, pending = asyncio.run(scenario())
    assert state.turns == 3 and pending is None
    assert state.summary == ["• turn one → reply one", "• turn two → reply two"]
    assert [m["content"] for m in state.recent] == ["turn four", "reply four"]


def test_a_turn_whose_store_write_failed_waits_and_is_recorded_once(manager: AsyncSessionManager,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A store failure may pass: that turn stays pending and the next add_items records it,
    once, before the new one."""
    from middleware.exceptions import StoreUnavailableError

    async def scenario() -> Any:
        session = MiddlewareSession("a-outage", manager)
        real = manager.record_turn

        async def down(*args: Any, **kwargs: Any) -> Any:
            raise StoreUnavailableError("Redis store is unreachable")

        monkeypatch.setattr(manager, "record_turn", down)
        with pytest.raises(StoreUnavailableError):
            await session.add_items([{"role": "user", "content": "turn one"}, reply("reply one")])
        monkeypatch.setattr(manager, "record_turn", real)
        await session.add_items([{"role": "user", "content": "turn two"}, reply("reply two")])
        state = await manager.get_state("a-outage")
        await manager.close()
        return state

    state = asyncio.run(scenario())
    assert state.turns == 2 and state.summary == ["• turn one → reply one"]
    assert [m["content"] for m in state.recent] == ["turn two", "reply two"]


def test_parallel_calls_each_keep_their_own_result(manager: AsyncSessionManager) -> None:
    """One model response with two calls at once, then both outputs (the order the Runner
    keeps items in: each call an assistant message of its own): the failed call sets no
    context key, the one that worked does."""

    async def scenario() -> dict[str, str]:
        session = MiddlewareSession("a4", manager)
        await session.add_items([
            {"role": "user", "content": "weather in Oslo, and the time in Bergen?"},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
            {"type": "function_call", "call_id": "c2", "name": "get_time", "arguments": '{"town": "Bergen"}'},
            {"type": "function_call_output", "call_id": "c1", "output": '{"error": "weather service down"}'},
            {"type": "function_call_output", "call_id": "c2", "output": '{"time": "12:00"}'},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "No weather; 12:00."}]},
        ])  # fmt: skip
        context = (await manager.get_state("a4")).context
        await manager.close()
        return context

    assert asyncio.run(scenario()) == {"town": "Bergen"}


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ({"role": "user", "content": "hi"}, {"role": "user", "content": "hi"}),
        ({"type": "function_call_output", "call_id": "c", "output": [{"type": "input_text", "text": "x"}]},
         {"role": "tool", "tool_call_id": "c", "content": "x"}),
        ({"type": "function_call_output", "call_id": "c", "output": {"a": 1}}, {"role": "tool", "tool_call_id": "c", "content": json.dumps({"a": 1})}),
        ({"type": "reasoning", "summary": []}, None),
    ],
)  # fmt: skip
def test_items_are_read_as_chat_messages(item: dict[str, Any], message: dict[str, Any] | None) -> None:
    assert chat_message(item) == message


def test_runs_at_once_on_one_session_each_record_their_own_turn(manager: AsyncSessionManager) -> None:
    """Found: three Runner.run on one session at once recorded one turn (the last input with
    the first run's reply) and lost two for good: the SDK saves each run's input when it
    starts and its outputs when it ends, and the runs shared one turn in progress. Each run
    now keeps its own (the SDK passes each call its run's context)."""

    async def scenario() -> Any:
        session = MiddlewareSession("a-gather", manager)
        await asyncio.gather(*(Runner.run(agent(), text, session=session) for text in ("one", "two", "three")))
        state = await manager.get_state("a-gather")
        await manager.close()
        return state

    state = asyncio.run(scenario())
    assert state.turns == 3
    said = [line for line in state.summary] + [f"• {state.recent[0]['content']} → {state.recent[1]['content']}"]
    assert sorted(said) == ["• one → ok: one", "• three → ok: three", "• two → ok: two"]
