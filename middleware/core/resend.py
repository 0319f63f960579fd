"""Resending a young session's own history (``caching.resend_history``). No I/O.

Where a model reads cached tokens for a fraction of their price, a short session's full
history, which only grows, is read from the cache call after call, while the composed
prompt's memory sections change every turn and are paid in full. So while the session is
young its turns resend the history as the traces recorded it (each turn's user message,
its tool rounds and results, its reply), append-only, with every schema; from the first
turn that composes instead, every later turn composes (``SessionState.composed``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .composer import REPLY_PRIMING, Composer
from .state import Prompt, SessionState, TokenBreakdown, built
from .text import parse_json

__all__ = ["resendable", "resent_prompt", "trace_messages"]


def resendable(traces: Sequence[Mapping[str, Any]]) -> bool:
    """Whether recorded turns can be sent as they are: none left tool calls out (an
    ``omitted`` event: the turn ran past traces.max_turn_chars), and every call's arguments
    are JSON within the nesting limit (a trace cuts long arguments in the middle, which
    providers refuse)."""
    for trace in traces:
        for event in trace.get("events") or ():
            kind = event.get("type")
            if kind == "omitted":
                return False
            if kind == "tool_call" and not _json(str(event.get("arguments") or "{}")):
                return False
    return True


def _json(text: str) -> bool:
    try:
        parse_json(text)
    except ValueError:
        return False
    return True


def trace_messages(trace: Mapping[str, Any], *, taken: set[str] | None = None, suffix: str = "") -> list[dict[str, Any]]:
    """One recorded turn's trace as the turn's own messages: the user message, each tool
    round's calls in one assistant message followed by their results, the reply. A call id
    already ``taken`` by an earlier turn (ids a caller did not give are ``call_<n>`` in every
    turn; providers want them unique) gets ``suffix``; each id used is added to ``taken``."""
    messages: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    round_ = None

    def flush() -> None:
        if calls:
            messages.append({"role": "assistant", "content": None, "tool_calls": list(calls)})
            messages.extend(results)
        calls.clear()
        results.clear()

    own: dict[str, str] = {}  # this turn's ids as sent

    def sent_id(call_id: str) -> str:
        if call_id not in own:
            own[call_id] = call_id + suffix if taken is not None and call_id in taken else call_id
        return own[call_id]

    for event in trace.get("events") or ():
        kind = event.get("type")
        if kind == "tool_call":
            if event.get("round") != round_:
                flush()
                round_ = event.get("round")
            calls.append({"id": sent_id(str(event.get("call_id"))), "type": "function",
                          "function": {"name": str(event.get("tool")), "arguments": str(event.get("arguments") or "{}")}})  # fmt: skip
        elif kind == "tool_result":
            results.append(
                {"role": "tool", "tool_call_id": sent_id(str(event.get("call_id"))), "content": str(event.get("result") or "")}
            )
        elif kind in ("user", "assistant"):
            flush()
            messages.append({"role": kind, "content": str(event.get("content") or "")})
    flush()
    if taken is not None:
        taken.update(own.values())
    return messages


def resent_prompt(
    composer: Composer, state: SessionState, traces: Sequence[Mapping[str, Any]], user_message: str, *, system: str | None = None
) -> Prompt:
    """The prompt that resends the session's own history: the static system text (or a
    client's own ``system`` text) and the notes, each recorded turn as its trace keeps it,
    then ``user_message`` (already checked). Append-only: the next turn's prompt starts with
    this one's messages."""
    tokenizer = composer.tokenizer
    notes = composer.notes_section(state.notes, composer.config.notes.max_tokens)
    own = "\n".join(part for part in (system, notes) if part) if system is not None else None
    text = own if own is not None else composer.system_prompt({}, notes)
    taken: set[str] = set()
    history = [message for n, trace in enumerate(traces) for message in trace_messages(trace, taken=taken, suffix=f"_{n}")]
    messages = [{"role": "system", "content": text}, *history, {"role": "user", "content": user_message}]
    system_tokens = tokenizer.count_chat("system", text)
    current_tokens = tokenizer.count_chat("user", user_message)
    static = min(composer.static_tokens, system_tokens)
    breakdown = built(TokenBreakdown, system=static, notes=system_tokens - static, context=0, summary=0,
                      recent=sum(tokenizer.count_message(m) for m in history), current=current_tokens,
                      priming=REPLY_PRIMING)  # fmt: skip
    full = composer.static_tokens + state.full_tokens + current_tokens + REPLY_PRIMING
    return built(Prompt, messages=messages, tokens=breakdown, full_history_tokens=full, turn=state.turns + 1,
                 stable_system_chars=len(text))  # fmt: skip
