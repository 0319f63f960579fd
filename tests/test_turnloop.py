"""Tests for middleware.turnloop: the sans-I/O tool loop."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from middleware.core.turnloop import TurnLoop, valid_tool_sequence
from middleware.tools import Toolset
from tests.conftest import run_call

PROMPT = [{"role": "system", "content": "s"}, {"role": "user", "content": "go"}]


def echo(value: str = "") -> dict:
    """Echoes."""
    return {"success": True, "value": value}


def tool_message(*names: str, content: str | None = None) -> dict:
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [{"id": f"id{i}", "function": {"name": n, "arguments": '{"value": "x"}'}} for i, n in enumerate(names)],
    }


def test_results_follow_their_calls_in_order() -> None:
    """Two calls in one reply are answered in order right after it."""
    loop = TurnLoop(PROMPT, max_rounds=3)
    pending = loop.take(tool_message("echo", "missing"))
    loop.give(run_call(Toolset([echo]), p.id, p.name, p.arguments) for p in pending)
    assert [m["role"] for m in loop.loop_messages] == ["assistant", "tool", "tool"]
    assert [m["tool_call_id"] for m in loop.loop_messages[1:]] == ["id0", "id1"]
    assert loop.take({"role": "assistant", "content": "done"}) == [] and loop.final == "done"
    assert [c.ok for c in loop.calls] == [True, False]
    assert valid_tool_sequence(loop.messages)


def test_rounds_are_bounded() -> None:
    """Past max_rounds the calls are not run and the turn ends with a note."""
    loop = TurnLoop(PROMPT, max_rounds=1)
    loop.give(run_call(Toolset([echo]), p.id, p.name, p.arguments) for p in loop.take(tool_message("echo")))
    assert loop.take(tool_message("echo", content="still going")) == []
    assert loop.stopped_early and loop.final == "still going (stopped after 1 tool rounds)"
    assert valid_tool_sequence(loop.messages)


def test_missing_ids_are_generated() -> None:
    """Providers that omit call ids still get matching tool_call_id values."""
    loop = TurnLoop(PROMPT, max_rounds=2)
    pending = loop.take({"role": "assistant", "tool_calls": [{"function": {"name": "echo", "arguments": {}}}]})
    assert pending[0].id == "call_0_0" and pending[0].arguments == "{}"


replies = st.lists(
    st.one_of(
        st.just({"role": "assistant", "content": "final"}),
        st.lists(st.sampled_from(["echo", "nope"]), min_size=1, max_size=3).map(lambda names: tool_message(*names)),
    ),
    min_size=1,
    max_size=8,
)


@given(replies=replies, max_rounds=st.integers(min_value=0, max_value=4))
def test_any_model_behaviour_keeps_the_sequence_valid(replies: list[dict], max_rounds: int) -> None:
    """Whatever the model replies, every tool result follows its call and the loop ends."""
    loop = TurnLoop(PROMPT, max_rounds=max_rounds)
    toolset = Toolset([echo])
    for reply in [*replies, {"role": "assistant", "content": "final"}]:
        pending = loop.take(reply)
        if pending:
            loop.give(run_call(toolset, p.id, p.name, p.arguments) for p in pending)
        assert valid_tool_sequence(loop.messages)
        if loop.done:
            break
    assert loop.done and loop.rounds <= max_rounds
