"""The hard token budget: what gives first, and a property for any input."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from middleware import Config, SessionManager, SessionState, TokenBudgetError, compose, is_valid_chat, load_config
from middleware.core.text import CUT_MARKER
from middleware.session.standalone import composer_for
from tests.strategies import any_text

CONFIG = load_config(env={})
TOKENIZER = composer_for(CONFIG).tokenizer
LINES = [f"• step {i} of the plan → Navigated to 'node_{i}' on google_tv" for i in range(3)]
BIG_REPLY = "START " + "the device shows a long list of channels and programmes " * 200 + " END"


def state(reply: str = BIG_REPLY) -> SessionState:
    return SessionState(
        context={"userinterface_name": "google_tv"},
        summary=list(LINES),
        recent=[{"role": "user", "content": "list every channel"}, {"role": "assistant", "content": reply}],
    )


def test_no_budget_changes_nothing() -> None:
    """Without a budget the prompt is composed whole."""
    prompt = compose(state(), "next", CONFIG)
    assert prompt.trimmed == () and prompt.messages[4]["content"] == BIG_REPLY


def test_an_oversized_recent_message_is_cut_in_the_middle_first() -> None:
    """Slightly over budget: the big reply keeps its ends around a marker; the summary stays."""
    whole = compose(state(), "next", CONFIG).tokens.total
    prompt = compose(state(), "next", CONFIG, budget=whole - 500)
    reply = prompt.messages[4]["content"]
    assert reply.startswith("START") and reply.endswith("END") and CUT_MARKER.strip() in reply
    assert prompt.messages[1]["content"].count("•") == 3  # summary untouched
    assert prompt.trimmed == ("recent_cut:assistant",)
    assert prompt.tokens.total <= whole - 500
    assert prompt.tokens.total == TOKENIZER.count_messages(prompt.messages)


def test_then_summary_lines_go_oldest_first_then_the_recent_pair() -> None:
    """Tighter budgets drop summary lines (oldest first), then the recent pair; the
    system prompt and the current message are always kept whole."""
    bare = compose(SessionState(context={"userinterface_name": "google_tv"}), "next", CONFIG).tokens.total
    seen = set()
    for budget in range(bare, bare + 200, 4):
        prompt = compose(state(), "next", CONFIG, budget=budget)
        assert prompt.tokens.total <= budget and is_valid_chat(prompt.messages)
        assert prompt.messages[0]["content"].endswith("- userinterface_name: google_tv")
        assert prompt.messages[-1] == {"role": "user", "content": "next"}
        summary = next((m["content"] for m in prompt.messages if m["content"].startswith("[Previous")), "")
        if summary:  # the lines kept are always the newest ones
            kept = summary.splitlines()[1:]
            assert kept == LINES[len(LINES) - len(kept) :]
        seen.add(prompt.trimmed)
    assert (
        "recent_cut:assistant",
        "summary_line_dropped",
        "summary_line_dropped",
        "summary_line_dropped",
        "recent_dropped",
    ) in seen
    assert any("recent_dropped" not in t and "summary_line_dropped" in t for t in seen)


def test_a_current_message_beyond_the_budget_is_a_clear_error() -> None:
    """What is never cut already exceeding the budget raises TokenBudgetError with figures."""
    with pytest.raises(TokenBudgetError) as info:
        compose(state(), "word " * 500, CONFIG, budget=100)
    assert "current message 505" in str(info.value) and "the budget is 100." in str(info.value)
    with pytest.raises(TokenBudgetError, match="tool schemas 400"):
        compose(SessionState(), "hi", CONFIG, budget=300, extra_tokens=400)


def test_the_manager_budget_comes_from_the_model_window_and_counts_tool_schemas(atlas: Config) -> None:
    """Unset tokens.budget means the model's window minus reply_reserve; chat counts schemas."""
    with SessionManager(atlas.with_overrides(usage_log={"path": None}), redis_url="memory://budget-window") as mgr:
        assert mgr.budget("gpt-4o-mini") == 128_000 - 4096
        assert mgr.budget("ollama/llama3") == 8192 - 4096
        assert mgr.budget("no-such/model") is None
    capped = atlas.with_overrides(tokens={"budget": 500}, usage_log={"path": None})
    with SessionManager(capped, redis_url="memory://budget-chat") as mgr:
        mgr.record_turn("s", user="list every channel", assistant=BIG_REPLY)
        result = mgr.chat("s", "check current node", model="scripted/atlas")
        first = result.calls[0]
        assert first["tokens"]["tools"] > 0 and first["tokens"]["total"] <= 500
        assert result.prompt.trimmed  # the long reply was cut to make room


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    summary=st.lists(any_text, max_size=4),
    replies=st.lists(st.one_of(any_text, st.text(min_size=500, max_size=3000)), min_size=2, max_size=2),
    message=any_text.filter(str.strip),
    budget=st.integers(min_value=64, max_value=1500),
    extra=st.integers(min_value=0, max_value=300),
    earlier=st.integers(min_value=0, max_value=8),
)
def test_the_budget_is_never_exceeded(
    summary: list[str], replies: list[str], message: str, budget: int, extra: int, earlier: int
) -> None:
    """For any state, message and budget: either the prompt fits (and its figures are exact)
    or TokenBudgetError, raised only when system prompt + message + schemas exceed the budget
    (the keys set earlier give first: they are not part of what is never cut)."""
    current = SessionState(
        context={"userinterface_name": "google_tv"},
        earlier={f"key{i}": f"value number {i}" for i in range(earlier)},
        summary=summary,
        recent=[{"role": "user", "content": replies[0] or "x"}, {"role": "assistant", "content": replies[1] or "y"}],
    )
    try:
        prompt = compose(current, message, CONFIG, budget=budget, extra_tokens=extra)
    except TokenBudgetError:
        bare = compose(SessionState(context=current.context), message, CONFIG)
        assert bare.tokens.total + extra > budget
        return
    assert prompt.tokens.total + extra <= budget
    assert prompt.tokens.total == TOKENIZER.count_messages(prompt.messages)
    assert is_valid_chat(prompt.messages)
