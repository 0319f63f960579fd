"""Tests for middleware.manager: the public API, on both faces, on a worked example."""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from middleware import (
    AsyncSessionManager,
    Config,
    InvalidMessageError,
    InvalidSessionIdError,
    InvalidToolCallError,
    SessionManager,
    ToolCall,
    build_messages,
    is_valid_chat,
    load_config,
)
from middleware.exceptions import ConfigError, InvalidInputError
from middleware.testing import capture_events
from tests.conftest import ATLAS_PATH, FACES, Manager, ManagerFactory, open_manager
from tests.strategies import turns

# A worked example: four requests, the first one naming the interface.
WATCHLIST = ToolCall(
    name="navigate_to_node",
    arguments={"userinterface_name": "google_tv", "tree_id": "xxx-xxx-xxx", "node": "watchlist"},
    result={"success": True, "path": ["home", "watchlist"]},
    ok=True,
)
SHOP = ToolCall(
    name="navigate_to_node",
    arguments='{"userinterface_name": "google_tv", "tree_id": "xxx-xxx-xxx", "node": "shop"}',
    result={"success": True, "path": ["watchlist", "home", "shop"]},
)
CURRENT = ToolCall(name="get_current_node", arguments={}, result={"node": "shop", "screen": "Shop"})


def test_the_worked_example(manager: Manager) -> None:
    """Context keys are set and injected, 'goto shop' carries the interface unnamed,
    the summary has its `• brief → action` format, and the messages come in their order."""
    sid = "seed"
    first = manager.build_messages(sid, "navigate to watchlist on google_tv")
    assert [m["role"] for m in first] == ["system", "user"]
    assert "## Current Context" not in first[0]["content"]  # no context yet: no section
    with capture_events() as events:
        manager.record_turn(
            sid, user="navigate to watchlist on google_tv", assistant="✅ Navigated to watchlist", tool_calls=[WATCHLIST]
        )
    assert [(e["event"], e.get("key")) for e in events if e["event"] == "context.set"] == [
        ("context.set", "userinterface_name"),
        ("context.set", "tree_id"),
    ]
    assert any(e["event"] == "summary.updated" for e in events)

    # "goto shop": the user does not name the interface; the prompt carries it.
    shop = manager.build_messages(sid, "goto shop")
    system = shop[0]["content"]
    assert system.endswith("## Current Context (use as defaults)\n- userinterface_name: google_tv\n- tree_id: xxx-xxx-xxx")
    assert [m["role"] for m in shop] == ["system", "user", "assistant", "user"]  # no older turns yet
    manager.record_turn(sid, user="goto shop", assistant="✅ Navigated to shop", tool_calls=[SHOP])

    manager.build_messages(sid, "check current node")
    manager.record_turn(sid, user="check current node", assistant="You are on the Shop screen.", tool_calls=[CURRENT])

    final = manager.build_messages(sid, "now show current node")
    assert [m["role"] for m in final] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert final[1]["content"] == (
        "[Previous conversation summary]\n"
        "• navigate to watchlist on google_tv → Navigated to 'watchlist' on google_tv\n"
        "• goto shop → Navigated to 'shop' on google_tv"
    )
    assert final[2]["content"] == "Understood."
    assert final[3:] == [
        {"role": "user", "content": "check current node"},
        {"role": "assistant", "content": "You are on the Shop screen."},
        {"role": "user", "content": "now show current node"},
    ]
    assert is_valid_chat(final)
    state = manager.get_state(sid)
    assert state.turns == 3 and state.context == {"userinterface_name": "google_tv", "tree_id": "xxx-xxx-xxx"}
    # The same messages come from the pure function given the loaded state.
    assert build_messages(state, "now show current node", manager.config) == final


def test_prepare_reports_the_saving_against_the_full_history(manager: Manager) -> None:
    """prepare() gives the tokens sent by layer and what the full history would cost."""
    for user, reply, call in [
        ("navigate to watchlist on google_tv", "Done", WATCHLIST),
        ("goto shop", "Done", SHOP),
        ("check current node", "Shop", CURRENT),
    ]:
        manager.record_turn("s", user=user, assistant=reply, tool_calls=[call])
    prompt = manager.prepare("s", "now show current node")
    assert prompt.tokens.total == manager.tokenizer.count_messages(prompt.messages)
    assert prompt.full_history_tokens > prompt.tokens.total
    assert 0 < prompt.saved_ratio < 1


def test_tool_calls_may_be_given_as_dicts(manager: Manager) -> None:
    """record_turn accepts plain dicts and OpenAI tool_calls entries as well as ToolCall."""
    manager.record_turn(
        "s",
        user="take control of device1",
        assistant="ok",
        tool_calls=[
            {"name": "take_control", "arguments": {"host_name": "sunri-pi1", "device_id": "device1"}, "ok": True},
            {"id": "c2", "function": {"name": "navigate_to_node", "arguments": '{"userinterface_name": "tv"}'}},
        ],
    )
    assert manager.get_state("s").context == {"userinterface_name": "tv", "host_name": "sunri-pi1", "device_id": "device1"}


@pytest.mark.parametrize(
    "bad",
    [[{"nme": "typo"}], ["navigate_to_node"], [42], "navigate_to_node", {"name": "x"}, [{"name": ""}]],
)
def test_bad_tool_calls_are_clear_errors_and_record_nothing(manager: Manager, bad: object) -> None:
    """Malformed tool calls raise InvalidToolCallError before anything is written."""
    with pytest.raises(InvalidToolCallError):
        manager.record_turn("s", user="a", assistant="b", tool_calls=bad)  # type: ignore[arg-type]
    assert manager.get_state("s").turns == 0


@pytest.mark.parametrize(
    "sid",
    [
        "",
        "   ",
        "x" * 257,
        "line\nbreak",
        "tab\there",
        "nul\x00",
        42,
        None,
        b"bytes",
        ("t",),
        "admin\u202egnp.exe",
        "us\u200ber",
        "a\u00a0b",
        "\ue000private",
        "a\u2028b",
    ],
)
def test_invalid_session_ids_are_refused_everywhere(manager: Manager, sid: object) -> None:
    """Every public method refuses bad session ids with InvalidSessionIdError: wrong types,
    empty, too long, and any character that is not printable (controls, bidi overrides and
    zero-width characters that would spoof another id in a listing, non-breaking spaces,
    private use)."""
    for call in (
        lambda: manager.build_messages(sid, "hi"),  # type: ignore[arg-type]
        lambda: manager.record_turn(sid, user="a", assistant="b"),  # type: ignore[arg-type]
        lambda: manager.get_state(sid),  # type: ignore[arg-type]
        lambda: manager.reset(sid),  # type: ignore[arg-type]
    ):
        with pytest.raises(InvalidSessionIdError):
            call()


@pytest.mark.parametrize("sid", ["user:42", "ünïcødé-会话", "a}b{c", "x" * 256, "with space", "emoji-🙂", "ß-Ω-é"])
def test_unusual_but_valid_session_ids_work(manager: Manager, sid: str) -> None:
    """Non-ASCII, braces, spaces and the maximum length are all fine."""
    manager.record_turn(sid, user="hi", assistant="hello")
    assert manager.get_state(sid).turns == 1


def test_empty_user_message_cannot_be_recorded(manager: Manager) -> None:
    """Recording a turn with no user text is refused: it could never be sent back."""
    with pytest.raises(InvalidMessageError):
        manager.record_turn("s", user="  ", assistant="b")


def test_both_faces_compose_the_same_messages(atlas: Config, store_url: str) -> None:
    """AsyncSessionManager, driven directly, gives the same messages and state as the sync manager."""

    async def run() -> tuple[list[dict[str, str]], int]:
        async with AsyncSessionManager(atlas, redis_url=store_url) as mgr:
            await mgr.record_turn("a", user="navigate to watchlist on google_tv", assistant="Done", tool_calls=[WATCHLIST])
            await mgr.record_turn("a", user="goto shop", assistant="Done", tool_calls=[SHOP])
            messages = await mgr.build_messages("a", "check current node")
            state = await mgr.get_state("a")
            await mgr.reset("a")
            assert (await mgr.get_state("a")).turns == 0
            return messages, state.turns

    messages, turns = asyncio.run(run())
    with SessionManager(atlas, redis_url=f"memory://{uuid.uuid4().hex}") as sync:
        sync.record_turn("a", user="navigate to watchlist on google_tv", assistant="Done", tool_calls=[WATCHLIST])
        sync.record_turn("a", user="goto shop", assistant="Done", tool_calls=[SHOP])
        assert messages == sync.build_messages("a", "check current node")
    assert turns == 2


def test_debug_events_hide_content_unless_configured(atlas: Config, managers: ManagerFactory) -> None:
    """context.set and summary.updated carry values only when usage_log.include_content is on."""
    for include, expect_value in [(False, "<9 chars>"), (True, "google_tv")]:
        config = atlas.with_overrides(usage_log={"include_content": include, "path": None})
        with managers(config) as mgr, capture_events() as events:
            mgr.record_turn("s", user="navigate to watchlist on google_tv", assistant="ok", tool_calls=[WATCHLIST])
        values = [e["value"] for e in events if e["event"] == "context.set" and e["key"] == "userinterface_name"]
        assert values == [expect_value]


def test_library_prints_nothing_by_default(manager: Manager, capsys: pytest.CaptureFixture[str]) -> None:
    """With logging unconfigured, recording turns writes nothing to stdout or stderr."""
    manager.record_turn("s", user="navigate to watchlist on google_tv", assistant="ok", tool_calls=[WATCHLIST])
    manager.build_messages("s", "goto shop")
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


@pytest.mark.parametrize("face", FACES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sequence=st.lists(turns, min_size=1, max_size=12), current=st.text(min_size=1).filter(str.strip))
def test_any_sequence_of_turns_keeps_the_limits_and_a_valid_prompt(face: str, sequence: list[dict], current: str) -> None:
    """Whatever is recorded, on either face: at most 3 summary lines, at most 2 recent messages, a valid prompt."""
    config = load_config(ATLAS_PATH, env={}).with_overrides(
        usage_log={"path": None}, store={"url": f"memory://{uuid.uuid4().hex}"}
    )
    loop = asyncio.new_event_loop()
    with open_manager(face, config, loop) as mgr:
        for index, turn in enumerate(sequence, start=1):
            assert mgr.record_turn("p", **turn) == index
            state = mgr.get_state("p")
            assert len(state.summary) <= 3 and len(state.recent) <= 2
            assert all(line.count("\n") == 0 for line in state.summary)
            assert all(value.isprintable() for value in state.context.values())
            assert is_valid_chat(mgr.build_messages("p", current))
    loop.close()


@pytest.mark.parametrize(
    "call",
    [
        {"name": "navigate_to_node", "arguments": {"node": "shop"}, "result": {"success": False, "error": "no node"}},
        {"id": "c1", "type": "function", "function": {"name": "navigate_to_node", "arguments": '{"node": "shop"}'},
         "result": {"error": "no node"}},
    ],
    ids=["fields", "openai-entry"],
)  # fmt: skip
def test_a_dict_call_without_ok_is_read_from_its_result_as_every_entrance_reads_it(call: dict[str, Any]) -> None:
    """Found: record_turn took a dict call whose result said it failed as a success (ok's default),
    so its arguments became context keys, while chat() and the endpoint mark the same call
    failed. Without "ok", the result decides; an explicit ok still wins."""
    with SessionManager() as mgr:
        mgr.record_turn("failed-call", user="goto shop", assistant="No such node.", tool_calls=[call])
        assert mgr.get_state("failed-call").context == {}
        mgr.record_turn("told-ok", user="goto shop", assistant="Done.", tool_calls=[{**call, "ok": True}])
        assert mgr.get_state("told-ok").context == {"node": "shop"}


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda mgr: mgr.chat("s", "hi", model=5), "model is of type int; expected a litellm model string"),
        (lambda mgr: mgr.prepare("s", "hi", model="x" * 300), "model has 300 characters; expected a litellm model string"),
        (lambda mgr: mgr.budget([1]), "model is of type list"),
        (lambda mgr: mgr.list_sessions(search=5), "search is of type int; expected a string"),
        (lambda mgr: mgr.list_sessions(page="1"), "page is '1' (a str); expected an integer."),
        (lambda mgr: mgr.list_sessions(page_size=True), "page_size is True (a bool); expected an integer."),
        (lambda mgr: mgr.inspect("s", traces=1.5), "traces is 1.5 (a float); expected an integer."),
    ],
    ids=["chat-model", "long-model", "budget", "search", "page-str", "page-size-bool", "traces-float"],
)
def test_arguments_of_the_wrong_type_are_named(call: Any, fragment: str) -> None:
    """Found: each raised AttributeError or TypeError from deep inside ('int' object has no
    attribute 'startswith'), or read a string, a float or a bool as a page number."""
    with SessionManager() as mgr, pytest.raises(InvalidInputError, match=re.escape(fragment)):
        call(mgr)


def test_a_prompt_that_is_not_a_string_is_named() -> None:
    for name in ("system_prompt", "instructions"):
        with pytest.raises(ConfigError, match=f"{name} is of type int; expected a string."):
            SessionManager(**{name: 5})
