"""Tests for chat, achat, streaming and wrap, on both faces, through litellm with scripted models."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from middleware import (
    AsyncSessionManager,
    Config,
    InvalidMessageError,
    InvalidSessionIdError,
    LLMError,
    SessionManager,
    ToolCall,
    llm,
)
from middleware.core.turnloop import valid_tool_sequence
from middleware.demo import atlas
from middleware.demo.device import LAB
from middleware.store import RedisStore
from middleware.testing import capture_events
from middleware.testing.scripted import register
from middleware.turn.calls import CLEARED, CUT_FLOOR
from tests.conftest import Manager, ManagerFactory


class Spy:
    """A scripted model that records every request it receives, then answers like `inner`."""

    def __init__(self, inner: Any = atlas.respond) -> None:
        self.inner = inner
        self.requests: list[tuple[list[dict[str, Any]], list[dict[str, Any]] | None]] = []
        self.model = f"scripted/spy-{uuid.uuid4().hex[:8]}"
        register(self.model.split("/", 1)[1], self)

    def __call__(self, messages: Any, tools: Any) -> Any:
        self.requests.append(([dict(m) for m in messages], tools))
        return self.inner(messages, tools)


@pytest.fixture
def mgr(manager: Manager) -> Manager:
    """conftest's manager (usage log at log_path) with the simulated devices reset."""
    LAB.reset()
    return manager


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_chat_runs_tools_and_remembers_what_they_set(mgr: Manager) -> None:
    """The tool loop runs the device tools; context keys come from their arguments and
    'goto shop' reaches the model with the interface it never named."""
    spy = Spy()
    first = mgr.chat("s", "take control of device1 on sunri-pi1", model=spy.model)
    assert first.text == "✅ In control of device1 on sunri-pi1."
    assert [(c.name, c.ok) for c in first.tool_calls] == [("take_control", True)]
    mgr.chat("s", "navigate to watchlist on google_tv", model=spy.model)
    shop = mgr.chat("s", "goto shop", model=spy.model)
    system = spy.requests[-2][0][0]["content"]  # the first call of the 'goto shop' turn
    assert "- userinterface_name: google_tv" in system and "- device_id: device1" in system
    assert json.loads(shop.tool_calls[0].arguments_text) == {
        "node": "shop",
        "userinterface_name": "google_tv",
        "device_id": "device1",
    }
    assert shop.text == "✅ Navigated to shop on google_tv (3 steps)."
    state = mgr.get_state("s")
    assert state.turns == 3 == shop.turn
    assert state.context == {"userinterface_name": "google_tv", "host_name": "sunri-pi1", "device_id": "device1"}
    assert state.recent == [{"role": "user", "content": "goto shop"}, {"role": "assistant", "content": shop.text}]
    assert state.summary[-1] == "• navigate to watchlist on google_tv → Navigated to 'watchlist' on google_tv"
    # Tool calls and results were sent within the turn, in a valid order, and never stored.
    assert valid_tool_sequence(spy.requests[-1][0])
    assert all("tool_calls" not in m for m in state.recent)


def test_every_call_logs_token_figures_that_match_what_was_sent(mgr: Manager, log_path: Path) -> None:
    """One line per LLM call; its total equals litellm's count of the messages and tools
    the provider actually received. (The scripted provider reports usage with that same
    litellm count, so the provider figure shows the usage was carried through, not a
    second, independent count.)"""
    import litellm

    spy = Spy()
    for request in ["take control of device1 on sunri-pi1", "navigate to watchlist on google_tv", "goto shop", "hello"]:
        mgr.chat("s", request, model=spy.model)
    logged = lines(log_path)
    assert len(logged) == len(spy.requests) == 7  # three turns with a tool round, one without
    for line, (messages, tools) in zip(logged, spy.requests, strict=True):
        counted = litellm.token_counter(model=mgr.config.tokens.model, messages=messages, tools=tools)
        assert line["tokens"]["total"] == counted
        assert line["provider"]["prompt_tokens"] == counted
        assert line["full_history_tokens"] - line["tokens"]["total"] == line["saved_tokens"]
        layers = line["tokens"]
        assert (
            sum(
                layers[k]
                for k in ("system", "notes", "context", "state", "recall", "summary", "recent", "current", "tool_loop", "tools")
            )
            + 3
            == layers["total"]
        )
        assert line["cost_usd"] > 0 and line["latency_ms"] >= 0 and line["model"] == spy.model
    assert [(line["turn"], line["step"]) for line in logged] == [(1, 0), (1, 1), (2, 0), (2, 1), (3, 0), (3, 1), (4, 0)]
    assert [line["tool_calls"] for line in logged] == [1, 0, 1, 0, 1, 0, 0]
    assert logged[-1]["saved_tokens"] > 0


def test_log_holds_no_content_and_no_secrets_unless_asked(atlas: Config, managers: ManagerFactory, tmp_path: Path) -> None:
    """Message text appears in the log only with include_content; an API key never does."""
    for include in (False, True):
        path = tmp_path / f"log-{include}.jsonl"
        config = atlas.with_overrides(usage_log={"path": str(path), "include_content": include})
        with managers(config) as mgr:
            mgr.chat("s", "navigate to watchlist on google_tv", model="scripted/atlas", api_key="sk-live-SECRET-123")
        text = path.read_text()
        assert "sk-live-SECRET" not in text
        assert ("watchlist on google_tv" in text) is include


def test_achat_and_the_async_manager_behave_like_chat(atlas: Config, store_url: str, tmp_path: Path) -> None:
    """achat on both managers runs the same tools and records the same turn."""
    config = atlas.with_overrides(usage_log={"path": str(tmp_path / "a.jsonl")})

    async def run() -> list[Any]:
        LAB.reset()
        results = []
        with SessionManager(config, redis_url=store_url) as sync_mgr:
            results.append(await sync_mgr.achat("a", "take control of device1 on sunri-pi1", model="scripted/atlas"))
            results.append(await sync_mgr.achat("a", "navigate to watchlist on google_tv", model="scripted/atlas"))
        async with AsyncSessionManager(config, redis_url=store_url) as async_mgr:
            results.append(await async_mgr.chat("a", "goto shop", model="scripted/atlas"))
            results.append(await async_mgr.get_state("a"))
        return results

    control, watchlist, shop, state = asyncio.run(run())
    assert control.text == "✅ In control of device1 on sunri-pi1."
    assert watchlist.tool_calls[0].name == "navigate_to_node" and shop.turn == 3
    assert state.context["userinterface_name"] == "google_tv" and state.turns == 3


def test_bad_input_to_a_stream_fails_when_it_is_made(mgr: Manager) -> None:
    """Both faces check a stream's input when chat(stream=True) is called, before any I/O."""
    with pytest.raises(InvalidSessionIdError):
        mgr.chat("", "hello", model="scripted/atlas", stream=True)
    with pytest.raises(InvalidMessageError):
        mgr.chat("s", "   ", model="scripted/atlas", stream=True)


def test_streaming_yields_text_and_records_the_turn_when_it_ends(mgr: Manager, log_path: Path) -> None:
    """stream=True yields the reply in chunks, runs tools between calls, records at the end."""
    LAB.take_control("sunri-pi1", "device1")
    stream = mgr.chat("s", "navigate to watchlist on google_tv", model="scripted/atlas", stream=True)
    assert mgr.get_state("s").turns == 0  # nothing recorded before the stream is consumed
    chunks = list(stream)
    assert len(chunks) > 3 and "".join(chunks) == "✅ Navigated to watchlist on google_tv (2 steps)."
    assert stream.result is not None and stream.result.text == "".join(chunks)
    state = mgr.get_state("s")
    assert state.turns == 1 and state.context["userinterface_name"] == "google_tv"
    assert [line["kind"] for line in lines(log_path)] == ["stream", "stream"]


def test_a_stream_closed_early_records_what_was_said(mgr: Manager) -> None:
    """Stopping a stream midway still records the turn, marked as cut: nothing is lost."""
    stream = mgr.chat("s", "hello there", model="scripted/atlas", stream=True)
    next(iter(stream))
    stream.close()
    state = mgr.get_state("s")
    assert state.turns == 1 and state.recent[1]["content"].endswith("(cut: the stream ended early)")


def test_async_streaming_records_the_turn(atlas: Config, tmp_path: Path) -> None:
    """achat(stream=True) is an async iterator that records when it ends."""
    config = atlas.with_overrides(usage_log={"path": str(tmp_path / "s.jsonl")})

    async def run() -> tuple[list[str], int]:
        async with AsyncSessionManager(config, redis_url=f"memory://{uuid.uuid4().hex}") as amgr:
            stream = await amgr.achat("s", "what have we done so far?", model="scripted/atlas", stream=True)
            chunks = [chunk async for chunk in stream]
            return chunks, (await amgr.get_state("s")).turns

    chunks, turns = asyncio.run(run())
    assert "".join(chunks).startswith("Nothing yet") and turns == 1


def test_failing_tools_become_error_results_and_set_no_context(mgr: Manager) -> None:
    """A tool that raises gives the model an error result; the turn completes."""

    def navigate_to_node(node: str, userinterface_name: str) -> dict:
        """Always fails."""
        raise ConnectionError("device offline")

    result = mgr.chat("s", "navigate to watchlist on google_tv", model="scripted/atlas", tools=[navigate_to_node])
    assert result.text.startswith("❌ navigate to node failed: ConnectionError: device offline")
    assert [(c.name, c.ok) for c in result.tool_calls] == [("navigate_to_node", False)]
    assert mgr.get_state("s").context == {}


def test_the_tool_loop_is_bounded(mgr: Manager) -> None:
    """A model that never stops calling tools is cut off after max_tool_rounds."""

    def always_calls(messages: Any, tools: Any) -> dict:
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"c{len(messages)}",
                    "function": {"name": "get_node_tree", "arguments": '{"userinterface_name": "google_tv"}'},
                }
            ],
        }

    spy = Spy(always_calls)
    result = mgr.chat("s", "loop forever", model=spy.model)
    assert result.stopped_early and len(spy.requests) == mgr.config.max_tool_rounds + 1
    assert len(result.tool_calls) == mgr.config.max_tool_rounds
    assert mgr.get_state("s").turns == 1


def test_a_model_failure_after_tools_ran_still_records_the_turn(mgr: Manager) -> None:
    """If the model fails once tools have acted, the turn is recorded with those calls."""

    def fails_second_time(messages: Any, tools: Any) -> Any:
        if messages[-1]["role"] == "tool":
            raise RuntimeError("provider down")
        return atlas.respond(messages, tools)

    spy = Spy(fails_second_time)
    with pytest.raises(LLMError, match="provider down"):
        mgr.chat("s", "take control of device1 on sunri-pi1", model=spy.model)
    state = mgr.get_state("s")
    assert state.turns == 1 and state.context == {"host_name": "sunri-pi1", "device_id": "device1"}


def test_a_failure_before_any_tool_records_nothing(mgr: Manager) -> None:
    """A model error with no side effects leaves the session untouched (the caller can retry)."""
    with pytest.raises(LLMError, match="No scripted model 'missing'"):
        mgr.chat("s", "hi", model="scripted/missing")
    with pytest.raises(LLMError):
        mgr.chat("s", "hi", model="no-such-provider/model-x")
    assert mgr.get_state("s").turns == 0


# --- wrap --------------------------------------------------------------------


def test_wrap_a_chatbot_returning_text(mgr: Manager, log_path: Path) -> None:
    """The wrapped function gets the composed messages; its reply is recorded and logged."""
    seen: list[list[dict[str, str]]] = []

    def bot(messages: list[dict[str, str]]) -> str:
        seen.append(messages)
        return f"you said: {messages[-1]['content']}"

    chat = mgr.wrap(bot)
    assert chat("w", "first") == "you said: first"
    assert chat("w", "second") == "you said: second"
    assert seen[1][1:] == [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "you said: first"},
        {"role": "user", "content": "second"},
    ]
    assert mgr.get_state("w").turns == 2
    logged = lines(log_path)
    assert [line["kind"] for line in logged] == ["wrap", "wrap"]
    assert logged[1]["tokens"]["total"] == mgr.tokenizer.count_messages(seen[1])


def test_wrap_a_chatbot_returning_its_whole_turn(mgr: Manager) -> None:
    """A list of the turn's messages gives the tool calls with their results."""

    def bot(messages: list[dict[str, str]]) -> list[dict[str, Any]]:
        return [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "a",
                        "type": "function",
                        "function": {
                            "name": "navigate_to_node",
                            "arguments": '{"userinterface_name": "google_tv", "node": "shop"}',
                        },
                    },
                    {
                        "id": "b",
                        "type": "function",
                        "function": {"name": "take_control", "arguments": '{"device_id": "d2", "host_name": "h"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "a", "content": '{"success": true}'},
            {"role": "tool", "tool_call_id": "b", "content": '{"success": false, "error": "busy"}'},
            {"role": "assistant", "content": "At the shop; d2 was busy."},
        ]

    mgr.wrap(bot)("w", "goto shop")
    state = mgr.get_state("w")
    assert state.recent[1]["content"] == "At the shop; d2 was busy."
    assert state.context == {"userinterface_name": "google_tv"}  # the failed call set nothing


def test_wrap_pairs_each_round_with_its_own_results_when_a_model_reuses_call_ids(mgr: Manager) -> None:
    """Some models number their calls afresh each round ("call_0" every time): a call is
    paired with the result that answers it in its own round, not a later round's."""

    def call(name: str, arguments: str) -> dict[str, Any]:
        return {"id": "call_0", "type": "function", "function": {"name": name, "arguments": arguments}}

    def bot(messages: list[dict[str, str]]) -> list[dict[str, Any]]:
        return [
            {"role": "assistant", "content": None, "tool_calls": [call("take_control", '{"device_id": "d2", "host_name": "h"}')]},
            {"role": "tool", "tool_call_id": "call_0", "content": '{"success": false, "error": "busy"}'},
            {"role": "assistant", "content": None,
             "tool_calls": [call("navigate_to_node", '{"userinterface_name": "google_tv", "node": "shop"}')]},
            {"role": "tool", "tool_call_id": "call_0", "content": '{"success": true}'},
            {"role": "assistant", "content": "At the shop; d2 was busy."},
        ]  # fmt: skip

    mgr.wrap(bot)("w", "goto shop")
    # The failed call set nothing; paired with the second round's success it would have set both.
    assert mgr.get_state("w").context == {"userinterface_name": "google_tv"}


def test_wrap_pairs_parallel_calls_given_one_assistant_message_each(mgr: Manager) -> None:
    """Two calls made at once, each in an assistant message of its own, then both results
    (as the Agents SDK's items read): each call gets its own result, so the failed one sets
    nothing."""

    def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
        return {"role": "assistant", "content": None,
                "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]}  # fmt: skip

    def bot(messages: list[dict[str, str]]) -> list[dict[str, Any]]:
        return [
            call("a", "take_control", '{"device_id": "d2", "host_name": "h"}'),
            call("b", "navigate_to_node", '{"userinterface_name": "google_tv", "node": "shop"}'),
            {"role": "tool", "tool_call_id": "a", "content": '{"success": false, "error": "busy"}'},
            {"role": "tool", "tool_call_id": "b", "content": '{"success": true}'},
            {"role": "assistant", "content": "At the shop; d2 was busy."},
        ]

    mgr.wrap(bot)("w", "goto shop")
    assert mgr.get_state("w").context == {"userinterface_name": "google_tv"}


def test_wrap_a_chatbot_returning_a_message_or_a_litellm_response(mgr: Manager) -> None:
    """OpenAI-style message dicts and litellm responses are understood."""
    from middleware import llm

    as_dict = mgr.wrap(
        lambda messages: {
            "role": "assistant",
            "content": "dict reply",
            "tool_calls": [{"id": "x", "function": {"name": "navigate_to_node", "arguments": '{"userinterface_name": "tv2"}'}}],
        }
    )
    as_dict("w", "one")
    response = mgr.wrap(lambda messages: llm.complete("scripted/echo", messages, None))("w", "two")
    assert response.choices[0].message.content == "echo: two"
    state = mgr.get_state("w")
    assert state.context == {"userinterface_name": "tv2"} and state.recent[1]["content"] == "echo: two"


def test_wrap_async_chatbots_with_either_manager(atlas: Config, tmp_path: Path) -> None:
    """Async chatbots are awaited; the async manager wraps sync and async chatbots."""
    config = atlas.with_overrides(usage_log={"path": str(tmp_path / "w.jsonl")})

    async def bot(messages: list[dict[str, str]]) -> str:
        await asyncio.sleep(0)
        return "async " + messages[-1]["content"]

    async def run() -> tuple[str, str, int]:
        with SessionManager(config, redis_url=f"memory://{uuid.uuid4().hex}") as sync_mgr:
            first = await sync_mgr.wrap(bot)("w", "hi")
        async with AsyncSessionManager(config, redis_url=f"memory://{uuid.uuid4().hex}") as amgr:
            second = await amgr.wrap(lambda messages: "sync under async")("w", "hey")
            turns = (await amgr.get_state("w")).turns
        return first, second, turns

    assert asyncio.run(run()) == ("async hi", "sync under async", 1)


def test_wrap_passes_extra_arguments_through(mgr: Manager) -> None:
    """Arguments after the session id and message reach the wrapped chatbot as given."""
    seen: list[tuple[Any, ...]] = []

    def bot(messages: list[dict[str, str]], style: str, *, temperature: float = 1.0) -> str:
        seen.append((style, temperature))
        return f"{style} reply"

    chat = mgr.wrap(bot)
    assert chat("w", "hi", "terse", temperature=0.2) == "terse reply"
    assert seen == [("terse", 0.2)] and mgr.get_state("w").turns == 1


def test_the_sync_managers_async_methods_keep_store_calls_off_the_event_loop(atlas: Config, store_url: str) -> None:
    """SessionManager.achat and a wrapped async chatbot send every store batch from a
    worker thread, never from the thread running the event loop."""
    threads: list[str] = []

    class Watched(RedisStore):
        def send(self, batch: Any) -> list[Any]:
            threads.append(threading.current_thread().name)
            return super().send(batch)

    async def bot(messages: list[dict[str, str]]) -> str:
        return "ok"

    async def run() -> str:
        with SessionManager(
            atlas.with_overrides(usage_log={"path": None}), store=Watched.from_url(store_url, atlas.store)
        ) as mgr:
            await mgr.achat("t", "take control of device1 on sunri-pi1", model="scripted/atlas")
            stream = await mgr.achat("t", "hello", model="scripted/atlas", stream=True)
            assert "".join([chunk async for chunk in stream])
            await mgr.wrap(bot)("t", "hi")
            assert (await mgr.achat("t", "hello", model="scripted/atlas")).turn == 4
        return threading.current_thread().name

    LAB.reset()
    loop_thread = asyncio.run(run())
    assert len(threads) >= 8 and loop_thread not in threads


def test_the_result_sums_what_the_calls_cost(mgr: Manager) -> None:
    """ChatResult.usage and cost_usd add up the usage lines of the turn's calls; str() is the text."""
    result = mgr.chat("s", "take control of device1 on sunri-pi1", model="scripted/atlas")
    assert len(result.calls) == 2 and str(result) == result.text
    assert result.usage["prompt_tokens"] == sum(line["provider"]["prompt_tokens"] for line in result.calls) > 0
    assert result.cost_usd == pytest.approx(sum(line["cost_usd"] for line in result.calls))


def test_tool_results_are_cut_to_keep_the_next_call_within_the_budget(atlas: Config, managers: ManagerFactory) -> None:
    """A tool result too big for the budget reaches the model cut in the middle, its ends kept."""

    def read_log(name: str) -> str:
        """A huge log."""
        return "START " + "line of the log " * 3000 + " END"

    def reads(messages: Any, tools: Any) -> dict[str, Any]:
        if messages[-1]["role"] == "tool":
            return {"role": "assistant", "content": "read it"}
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "r1", "function": {"name": "read_log", "arguments": '{"name": "x"}'}}],
        }

    spy = Spy(reads)
    mgr = managers(atlas.with_overrides(tokens={"budget": 2000}))
    result = mgr.chat("s", "read the log", model=spy.model, tools=[read_log])
    assert result.text == "read it"
    sent = spy.requests[-1][0][-1]["content"]
    assert sent.startswith("START") and sent.endswith("END") and "[…cut…]" in sent
    assert mgr.tokenizer.count_messages(spy.requests[-1][0]) < 2000
    # Remembered with the text the model saw (the history resent later is what it was
    # sent), its value whole.
    (call,) = result.tool_calls
    assert call.result_text == sent and call.result == read_log("x")


def test_a_long_loop_of_small_results_stays_within_the_budget(atlas: Config, managers: ManagerFactory) -> None:
    """Results too short to cut in the middle add up over a long loop: earlier rounds' are
    cleared, the oldest first (the latest round's, not read yet, stay whole), so every call
    fits the budget; each call is remembered with the text the model saw, its value whole."""

    def probe(n: int) -> str:
        """A short reading."""
        return f"reading {n}: " + "steady " * 45

    rounds, width = 20, 3

    def loops(messages: Any, tools: Any) -> dict[str, Any]:
        results = sum(1 for m in messages if m["role"] == "tool")
        if results == rounds * width:
            return {"role": "assistant", "content": "done"}
        calls = [{"id": f"p{results + k}", "function": {"name": "probe", "arguments": json.dumps({"n": results + k})}}
                 for k in range(width)]  # fmt: skip
        return {"role": "assistant", "content": None, "tool_calls": calls}

    spy, budget = Spy(loops), 3000
    mgr = managers(atlas.with_overrides(tokens={"budget": budget}, max_tool_rounds=rounds))
    result = mgr.chat("s", "probe it all", model=spy.model, tools=[probe])
    assert result.text == "done" and len(result.tool_calls) == rounds * width
    sizes = [mgr.tokenizer.count_messages(messages) + llm.tools_tokens(spy.model, tools) for messages, tools in spy.requests]
    assert max(sizes) <= budget, sizes
    last = spy.requests[-1][0]
    results = [m["content"] for m in last if m["role"] == "tool"]
    assert results[0] == CLEARED and results[-width:] == [probe(n) for n in range(rounds * width - width, rounds * width)]
    assert all(mgr.tokenizer.count(probe(n)) <= CUT_FLOOR for n in range(rounds * width))  # none could be cut in the middle
    first = result.tool_calls[0]
    assert first.result_text == CLEARED and first.result == probe(0)


def test_a_call_whose_arguments_exceed_the_budget_is_made_with_a_warning(atlas: Config, managers: ManagerFactory) -> None:
    """A call's own arguments are never cut: when they alone exceed the budget, the call is
    still made (the provider judges it), its result, which the model has not read, cut to 64
    tokens but not cleared, and a warning says by how much."""

    def save(text: str) -> str:
        """Save a text."""
        return "saved " + "ok " * 80

    def writes(messages: Any, tools: Any) -> dict[str, Any]:
        if messages[-1]["role"] == "tool":
            return {"role": "assistant", "content": "saved it"}
        call = {"id": "w1", "function": {"name": "save", "arguments": json.dumps({"text": "word " * 3000})}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}

    spy = Spy(writes)
    mgr = managers(atlas.with_overrides(tokens={"budget": 2000}))
    with capture_events() as events:
        result = mgr.chat("s", "save a long text", model=spy.model, tools=[save])
    sent = spy.requests[-1][0][-1]["content"]
    assert result.text == "saved it" and "[…cut…]" in sent and mgr.tokenizer.count(sent) <= CUT_FLOOR
    (warning,) = [e for e in events if e["event"] == "turn.over_budget"]
    assert warning["budget"] == 2000 and warning["over"] > 1000
    assert warning["over"] == mgr.tokenizer.count_messages(spy.requests[-1][0]) + warning["schemas"] - 2000
    assert "word" not in str(warning)  # no message content in the event


def test_a_cut_result_is_remembered_on_its_own_call_when_the_model_reuses_call_ids(
    atlas: Config, managers: ManagerFactory
) -> None:
    """Some OpenAI-compatible servers number calls afresh each round (``call_0`` every time):
    the cut text belongs to the call whose result was cut, not to every call sharing its id."""

    def read_log(name: str) -> str:
        """A huge log."""
        return "START " + "line of the log " * 3000 + " END"

    def notify(name: str) -> str:
        """A short answer."""
        return "notified"

    def reads(messages: Any, tools: Any) -> dict[str, Any]:
        results = sum(1 for m in messages if m["role"] == "tool")
        if results == 2:
            return {"role": "assistant", "content": "done"}
        name = ("read_log", "notify")[results]
        call = {"id": "call_0", "function": {"name": name, "arguments": '{"name": "x"}'}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}

    mgr = managers(atlas.with_overrides(tokens={"budget": 2000}))
    result = mgr.chat("s", "read the log, then notify", model=Spy(reads).model, tools=[read_log, notify])
    log, note = result.tool_calls
    assert "[…cut…]" in log.result_text and note.result_text == "notified"


def test_wrap_refuses_a_sync_function_that_returns_an_awaitable(mgr: Manager) -> None:
    """A plain function returning a coroutine cannot be awaited by the sync face: a clear error, nothing recorded."""

    async def later() -> str:
        return "late"

    if isinstance(mgr, SessionManager):
        with pytest.raises(LLMError, match="wrap an async function"):
            mgr.wrap(lambda messages: later())("w", "hi")
        assert mgr.get_state("w").turns == 0
    else:  # the async face awaits whatever comes back
        assert mgr.wrap(lambda messages: later())("w", "hi") == "late"


def test_wrap_refuses_replies_it_cannot_read(mgr: Manager) -> None:
    """A reply that is none of the understood shapes is a clear LLMError."""
    with pytest.raises(LLMError, match="expected a string"):
        mgr.wrap(lambda messages: 42)("w", "hi")
    # Found: bytes were read as a list of messages and named as an int.
    with pytest.raises(LLMError, match="returned a bytes; expected a string"):
        mgr.wrap(lambda messages: b"hi")("w", "hi")


def test_tool_call_records_keep_results_for_the_full_history_figure(mgr: Manager) -> None:
    """Results count in the full-history tokens although they are never stored."""
    LAB.take_control("sunri-pi1", "device1")
    before = mgr.get_state("s").full_tokens
    result = mgr.chat("s", "show the node tree of google_tv", model="scripted/atlas")
    assert isinstance(result.tool_calls[0], ToolCall) and "nodes" in result.tool_calls[0].result_text
    grown = mgr.get_state("s").full_tokens - before
    assert grown > mgr.tokenizer.count(result.tool_calls[0].result_text)
