"""What recording a turn writes: derived from the turn alone, never from stored state, so
concurrent writers need no read-modify-write. No I/O."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..config.schema import Config
from .archive import pieces_of
from .context import extract_context
from .state import StoredMessage, Turn, TurnUpdate, built
from .summary import actions_of, summary_line
from .text import cut_middle

__all__ = ["MAX_TOOLS_RECORDED", "TOKENS_PER_MESSAGE", "turn_messages", "turn_update"]

# Tool names a turn records for disclosure, at most (the store orders them within a turn by index).
MAX_TOOLS_RECORDED = 999
# litellm's message arithmetic: 3 tokens per message.
TOKENS_PER_MESSAGE = 3


class _Counter(Protocol):
    def count(self, text: str) -> int: ...

    def count_chat(self, role: str, content: str) -> int: ...


def turn_update(
    turn: Turn, config: Config, tokenizer: _Counter, *, turn_id: str = "", prompt: str = "", observed: Sequence[str] = ()
) -> TurnUpdate:
    """What recording ``turn`` writes. It depends on the turn alone, never on stored
    state, so concurrent writers need no read-modify-write. ``turn_id`` and ``prompt``
    (the JSON of what the model was sent) are carried through as they are; ``observed``
    (what connectors saw after the turn) joins the archive."""
    # An empty reply (tool calls only) is remembered as what was done; a huge one is
    # cut in the middle so one reply cannot bloat the session.
    # (The recent window shows no tool result: a stand-in reply says what was done, not what it returned.)
    action, plain = actions_of(turn, config.summary)
    final = turn.assistant if turn.assistant.strip() else plain
    final = cut_middle(final, config.tokens.max_message_chars)
    pair = (
        StoredMessage("user", turn.user, tokenizer.count_chat("user", turn.user)),
        StoredMessage("assistant", final, tokenizer.count_chat("assistant", final)),
    )
    recent = pair if config.recent.messages else ()
    full = pair[0].tokens + pair[1].tokens + _tool_tokens(turn, tokenizer)
    return built(
        TurnUpdate,
        context=extract_context(turn.tool_calls, config.context),
        summary_line=summary_line(turn, config.summary, action=action),
        recent=recent,
        full_tokens=full,
        traces=_traces(turn, final, config.traces.max_entry_chars, config.traces.max_turn_chars)
        if config.traces.max_entries
        else (),
        turn_id=turn_id,
        prompt=prompt,
        pieces=pieces_of(turn, turn.assistant, tokenizer, observed) if config.memory.archive_turns else (),
        tools=tuple(dict.fromkeys(call.name for call in turn.tool_calls))[:MAX_TOOLS_RECORDED],
        composed=False,
    )


def turn_messages(turn: Turn, final: str) -> list[dict[str, Any]]:
    """The turn as a full-history chatbot would resend it: tool calls and results included."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": turn.user}]
    if turn.tool_calls:
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call.id or f"call_{index}",
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments_text},
                    }
                    for index, call in enumerate(turn.tool_calls)
                ],
            }
        )
        messages.extend(
            {"role": "tool", "tool_call_id": call.id or f"call_{index}", "content": call.result_text}
            for index, call in enumerate(turn.tool_calls)
        )
    messages.append({"role": "assistant", "content": final})
    return messages


def _tool_tokens(turn: Turn, tokenizer: _Counter) -> int:
    """What the turn's tool messages cost in a full history, counted as litellm counts
    the messages turn_messages builds (equal by test), without building them."""
    if not turn.tool_calls:
        return 0
    total = TOKENS_PER_MESSAGE + tokenizer.count("assistant")  # the tool-calling message
    tool_role = TOKENS_PER_MESSAGE + tokenizer.count("tool")
    for index, call in enumerate(turn.tool_calls):
        total += tokenizer.count(call.arguments_text)
        total += tool_role + tokenizer.count(call.id or f"call_{index}") + tokenizer.count(call.result_text)
    return total


def _traces(turn: Turn, final: str, cap: int, turn_cap: int) -> tuple[dict[str, Any], ...]:
    """The turn as raw trace events (user, each tool call and its result, assistant), each
    text cut in the middle past ``cap`` characters; tool calls past ``turn_cap`` characters
    for the whole turn are counted in one ``omitted`` event instead of kept."""

    def short(text: str) -> str:
        return text if len(text) <= cap else cut_middle(text, cap)

    user, reply = short(turn.user), short(final)
    room = turn_cap - len(user) - len(reply)
    entries: list[dict[str, Any]] = [{"type": "user", "content": user}]
    for index, call in enumerate(turn.tool_calls):
        call_id, arguments, result = call.id or f"call_{index}", short(call.arguments_text), short(call.result_text)
        room -= len(arguments) + len(result) + len(call.name) + 64  # 64: the event's own keys
        if room < 0:
            entries.append({"type": "omitted", "tool_calls": len(turn.tool_calls) - index})
            break
        entries.append({"type": "tool_call", "call_id": call_id, "tool": call.name, "arguments": arguments, "round": call.round})
        entries.append({"type": "tool_result", "call_id": call_id, "tool": call.name, "ok": call.ok, "result": result})
    entries.append({"type": "assistant", "content": reply})
    return tuple(entries)
