"""What the adapters share: memory as chat messages, whole turns in chat messages, and the
install line an adapter's missing library fails with."""

from __future__ import annotations

import importlib
import sys

import pytest

from middleware import Config, SessionState
from middleware.adapters.memory import memory_messages, turns_in
from middleware.exceptions import require
from middleware.tokens import get_tokenizer


def test_memory_is_the_memory_sections_then_the_summary_exchange_and_the_last_turn() -> None:
    """No static prompt (the framework brings its own), no current message."""
    state = SessionState(context={"city": "Paris"}, summary=["• a → b"],
                         recent=[{"role": "user", "content": "u"}, {"role": "assistant", "content": "v"}], turns=2)  # fmt: skip
    messages = memory_messages(state, Config(), get_tokenizer("gpt-4o-mini"))
    assert messages[0] == {"role": "system", "content": "## Current Context (use as defaults)\n- city: Paris"}
    assert [m["role"] for m in messages[1:]] == ["user", "assistant", "user", "assistant"]
    assert memory_messages(SessionState(), Config(), get_tokenizer("gpt-4o-mini")) == []


def test_whole_turns_are_read_and_the_rest_left_for_later() -> None:
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}],
    }
    messages = [{"role": "user", "content": "q"}, call, {"role": "tool", "tool_call_id": "c", "content": '{"ok": true}'},
                {"role": "assistant", "content": "done"}, {"role": "user", "content": "next"}]  # fmt: skip
    ((turn, used),) = turns_in(messages)
    assert used == 4 and (turn.user, turn.assistant) == ("q", "done")
    assert turns_in([*messages, {"role": "assistant", "content": "again"}])[1][1] == 6
    turns = [turn]
    assert turns[0].tool_calls[0].args == {"x": 1} and turns[0].tool_calls[0].result == {"ok": True}


def test_a_whole_turn_whose_user_text_is_only_whitespace_is_recorded_as_one_without_text() -> None:
    """The Agents SDK and LangChain adapters record a turn whose user message holds only
    whitespace (or no text: an image alone) as a message without text, which a turn may hold,
    where the text itself would be refused as empty."""
    messages = [{"role": "user", "content": " \n"}, {"role": "assistant", "content": "done"}, {"role": "user", "content": "next"}]
    ((turn, _),) = turns_in(messages)
    assert turn.user == "(a message without text)"


@pytest.mark.parametrize(("module", "line"), [("middleware.adapters.agents", 'pip install "token-middleware[agents]"'),
                                              ("middleware.adapters.langchain", 'pip install "token-middleware[langchain]"')])  # fmt: skip
def test_a_missing_library_fails_with_the_install_line(module: str, line: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("agents", "langchain", "langchain.agents", module):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setitem(sys.modules, "agents", None)  # None in sys.modules makes an import fail
    monkeypatch.setitem(sys.modules, "langchain.agents", None)
    with pytest.raises(ImportError, match=line.replace("[", r"\[").replace("]", r"\]")):
        importlib.import_module(module)


def test_require_names_the_package() -> None:
    with pytest.raises(ImportError, match=r"pip install \"token-middleware\[x\]\" \(or pip install nothing-here\)"):
        require("no_such_module_here", "x", "nothing-here")
