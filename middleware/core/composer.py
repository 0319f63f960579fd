"""The composer: session state + current message -> OpenAI-format messages. No I/O.

Message order::

    system     static instructions and skills first, the Current Context section last
    user       "[Previous conversation summary]\\n• … → …"   } only when older turns exist
    assistant  "Understood. I have the context."             }
    user       last user message                             } the recent window
    assistant  last assistant final text                     }
    user       the current message

Static text first keeps the byte-identical prefix long from turn to turn, so
provider prompt caches hit. The result always alternates user/assistant after
the system message and ends with the user's message. A ``Composer`` holds one
config, a tokenizer and the memos of what it has rendered and counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from ..config import Config, Skill
from ..exceptions import TokenBudgetError
from .context import extract_context, order_context, render_context
from .notes import render_notes
from .state import (
    Prompt,
    SessionState,
    StoredMessage,
    TokenBreakdown,
    Turn,
    TurnUpdate,
    built,
    check_user_message,
    whole_pairs,
)
from .summary import action_of, summary_line
from .text import CUT_MARKER, cut_middle, one_line, squeeze_blank_lines

__all__ = ["REPLY_PRIMING", "TOKENS_PER_MESSAGE", "Composer", "Tokenizer", "is_valid_chat", "render_skills", "turn_messages"]

# litellm's message arithmetic: 3 tokens per message, 3 more priming the reply.
TOKENS_PER_MESSAGE = 3
REPLY_PRIMING = 3


class Tokenizer(Protocol):
    """What the composer counts with (``middleware.tokens.Tokenizer`` is one)."""

    encoding_name: str

    def count(self, text: str) -> int: ...

    def count_chat(self, role: str, content: str) -> int: ...

    def cut_middle(self, text: str, max_tokens: int, marker: str) -> str: ...


def render_skills(skills: Iterable[Skill], header: str) -> str:
    """The Skills section, one line per skill, or "" when there are none."""
    lines = [f"- {skill.name}: {one_line(skill.description, 300)}" for skill in skills]
    return "\n".join([header, *lines]) if lines else ""


def _render_static(config: Config) -> str:
    head = config.prompt.static_head()
    text = head.format(
        name=config.assistant.name,
        instructions=config.assistant.instructions.strip(),
        skills=render_skills(config.skills, config.prompt.skills_header),
    )
    lines = "\n".join(line.rstrip() for line in text.splitlines())
    return squeeze_blank_lines(lines).strip()


class _Memo(dict):  # type: ignore[type-arg]
    """A small memo: the same inputs give the same string object, whose hash Python
    keeps, so the token-count cache answers without rehashing long text."""

    limit = 4096

    def get_or(self, key: Any, make: Any) -> Any:
        try:
            return self[key]
        except KeyError:
            if len(self) >= self.limit:
                self.clear()
            self[key] = value = make()
            return value


def _already_pairs(recent: Sequence[Mapping[str, Any]], counts: Sequence[int]) -> bool:
    if len(recent) % 2 or min(counts, default=0) < 0:
        return False
    for index, message in enumerate(recent):
        content = message.get("content")
        if message.get("role") != ("assistant" if index % 2 else "user") or not isinstance(content, str) or not content.strip():
            return False
    return True


def _recent_pairs(state: SessionState, tokenizer: Tokenizer) -> list[StoredMessage]:
    """Whole (user, assistant) pairs with text, however the state was made; counts
    stored with the messages are used, missing ones (-1) are counted here."""
    if state.pairs is not None:  # loaded by the store, which validated them
        return list(state.pairs)
    counts = state.recent_tokens if len(state.recent_tokens) == len(state.recent) else (-1,) * len(state.recent)
    if _already_pairs(state.recent, counts):  # a well-formed hand-made state: nothing to repair
        return [StoredMessage(m["role"], m["content"], t) for m, t in zip(state.recent, counts, strict=True)]
    messages = []
    for message, tokens in zip(state.recent, counts, strict=True):
        role, content = message.get("role"), message.get("content")
        if isinstance(role, str) and isinstance(content, str):
            messages.append(StoredMessage(role, content, tokens if tokens >= 0 else tokenizer.count_chat(role, content)))
    return whole_pairs(messages)


# Content tokens a cut recent message keeps at least; below that it is dropped with its pair.
_MIN_RECENT_TOKENS = 16


class Composer:
    """Composes prompts and turn updates for one config, counting with one tokenizer.

    It renders the static prefix once and keeps small memos of the sections it has
    rendered (context, notes, summary), so an unchanged part is neither rebuilt nor
    recounted from turn to turn.
    """

    def __init__(self, config: Config, tokenizer: Tokenizer) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.static_prefix = _render_static(config)
        self.static_tokens = tokenizer.count_chat("system", self.static_prefix)
        self._systems, self._notes, self._summaries = _Memo(), _Memo(), _Memo()

    def system_prompt(self, context: Mapping[str, str], notes_section: str = "") -> str:
        """Static prefix, then the notes section, then the Current Context section."""
        key = (tuple(context.items()), notes_section)
        return self._systems.get_or(key, lambda: self._render_system(context, notes_section))  # type: ignore[no-any-return]

    def _render_system(self, context: Mapping[str, str], notes_section: str) -> str:
        config = self.config.context
        section = render_context(order_context(context, config), config)
        return "\n".join(part for part in (self.static_prefix, notes_section, section) if part)

    def notes_section(self, notes: str, max_tokens: int) -> str:
        """The quoted notes section within ``max_tokens`` (cut in the middle beyond), or ""."""
        if not notes.strip() or max_tokens <= 0:
            return ""

        def make() -> str:
            rendered = render_notes(notes, self.config.notes.header)
            # Cutting the rendered text keeps every line quoted: the cut joins two quoted lines.
            fits = self.tokenizer.count(rendered) <= max_tokens
            return rendered if fits else self.tokenizer.cut_middle(rendered, max_tokens, CUT_MARKER)

        return self._notes.get_or((notes, max_tokens), make)  # type: ignore[no-any-return]

    def _summary_messages(self, lines: Sequence[str]) -> list[dict[str, str]]:
        if not lines:
            return []
        summary = self.config.summary
        text = self._summaries.get_or(tuple(lines), lambda: "\n".join([summary.header, *lines]))
        return [{"role": "user", "content": text}, {"role": "assistant", "content": summary.acknowledgement}]

    def _count(self, messages: Sequence[Mapping[str, str]]) -> int:
        return sum(self.tokenizer.count_chat(m["role"], m["content"]) for m in messages)

    def _fit(self, lines: list[str], recent: list[StoredMessage], room: int) -> tuple[list[str], list[StoredMessage], list[str]]:
        """Shrink the history to ``room`` tokens. What gives, in order: recent messages are
        cut in the middle (largest first), then summary lines go (oldest first), then the
        recent pair goes. Returns the lines, the recent messages and what was done."""
        tokenizer, done = self.tokenizer, []

        def used() -> int:
            return self._count(self._summary_messages(lines)) + sum(m.tokens for m in recent)

        for index in sorted(range(len(recent)), key=lambda i: -recent[i].tokens):
            over = used() - room
            if over <= 0:
                break
            message = recent[index]
            content_tokens = tokenizer.count(message.content)
            target = max(content_tokens - over, _MIN_RECENT_TOKENS)
            if target >= content_tokens:
                continue
            cut = tokenizer.cut_middle(message.content, target, CUT_MARKER)
            recent[index] = StoredMessage(message.role, cut, tokenizer.count_chat(message.role, cut))
            done.append(f"recent_cut:{message.role}")
        while lines and used() > room:
            lines.pop(0)
            done.append("summary_line_dropped")
        if recent and used() > room:
            recent.clear()
            done.append("recent_dropped")
        return lines, recent, done

    def _fit_memory(
        self, lines: list[str], notes: str, notes_cap: int, context: dict[str, str], budget: int
    ) -> tuple[list[str], int, dict[str, str], list[str]]:
        """Keep notes + context section + summary within ``budget`` tokens. What gives, in order:
        summary lines (oldest first), then the notes (cut in the middle, then dropped), then
        context keys (least recently set first: ``context`` is in the order keys were set)."""
        done: list[str] = []
        config = self.config.context

        def summary_size() -> int:
            return self._count(self._summary_messages(lines))

        def notes_size() -> int:
            return self.tokenizer.count(self.notes_section(notes, notes_cap))

        def context_size() -> int:
            return self.tokenizer.count(render_context(order_context(context, config), config))

        # Each size is recounted only when its own part changes.
        summary_tokens, notes_tokens, context_tokens = summary_size(), notes_size(), context_size()
        while lines and summary_tokens + notes_tokens + context_tokens > budget:
            lines = lines[1:]
            done.append("summary_line_dropped")
            summary_tokens = summary_size()
        if notes_tokens and summary_tokens + notes_tokens + context_tokens > budget:
            room = budget - summary_tokens - context_tokens
            notes_cap = room if room >= 24 else 0  # too little room for useful notes: leave them out
            done.append("notes_cut" if notes_cap else "notes_dropped")
            notes_tokens = notes_size()
        while context and summary_tokens + notes_tokens + context_tokens > budget:
            context = dict(list(context.items())[1:])
            done.append("context_key_dropped")
            context_tokens = context_size()
        return lines, notes_cap, context, done

    def compose(
        self, state: SessionState, user_message: str, *, budget: int | None = None, extra_tokens: int = 0, checked: bool = False
    ) -> Prompt:
        """The messages to send for ``user_message`` and their token figures.

        ``budget`` (default ``config.tokens.budget``) caps the prompt in tokens, counting
        ``extra_tokens`` sent beside the messages (tool schemas). The system prompt and the
        current message are never cut; if they alone exceed the budget, TokenBudgetError.
        ``checked``: the caller already ran ``check_user_message`` on the message.
        """
        config, tokenizer = self.config, self.tokenizer
        budget = budget if budget is not None else config.tokens.budget
        current = user_message if checked else check_user_message(user_message, limit=config.tokens.max_message_chars)
        static_tokens = self.static_tokens
        lines = list(state.summary[-config.summary.lines :]) if config.summary.lines else []
        context, notes_cap = dict(state.context), config.notes.max_tokens
        trimmed: list[str] = []
        if config.tokens.memory_budget is not None:
            lines, notes_cap, context, trimmed = self._fit_memory(
                lines, state.notes, notes_cap, context, config.tokens.memory_budget
            )
        notes = self.notes_section(state.notes, notes_cap)
        system = self.system_prompt(context, notes)
        system_tokens = tokenizer.count_chat("system", system)
        notes_tokens = tokenizer.count_chat("system", self.system_prompt({}, notes)) - static_tokens if notes else 0
        current_tokens = tokenizer.count_chat("user", current)
        recent = _recent_pairs(state, tokenizer)[-config.recent.messages :] if config.recent.messages else []
        summary = self._summary_messages(lines)
        summary_tokens = self._count(summary)
        recent_tokens = sum(m.tokens for m in recent)
        if budget is not None:
            fixed = system_tokens + current_tokens + REPLY_PRIMING + extra_tokens
            if fixed > budget:
                raise TokenBudgetError(
                    f"The prompt needs {fixed:,} tokens before any history (system prompt {system_tokens:,}, "
                    f"current message {current_tokens:,}, tool schemas {extra_tokens:,}); the budget is {budget:,}. "
                    "Shorten the message or raise tokens.budget."
                )
            if fixed + summary_tokens + recent_tokens > budget:  # only then is there anything to cut
                lines, recent, cut = self._fit(lines, list(recent), budget - fixed)
                trimmed += cut
                summary = self._summary_messages(lines)
                summary_tokens = self._count(summary)
                recent_tokens = sum(m.tokens for m in recent)
        messages = [
            {"role": "system", "content": system},
            *summary,
            *({"role": m.role, "content": m.content} for m in recent),
            {"role": "user", "content": current},
        ]
        breakdown = built(
            TokenBreakdown,
            system=static_tokens,
            notes=notes_tokens,
            context=system_tokens - static_tokens - notes_tokens,
            summary=summary_tokens,
            recent=recent_tokens,
            current=current_tokens,
            priming=REPLY_PRIMING,
        )
        full = static_tokens + state.full_tokens + current_tokens + REPLY_PRIMING
        return built(
            Prompt, messages=messages, tokens=breakdown, full_history_tokens=full, turn=state.turns + 1, trimmed=tuple(trimmed)
        )

    def apply_turn(self, turn: Turn, *, turn_id: str = "", prompt: str = "") -> TurnUpdate:
        """What recording ``turn`` writes. It depends on the turn alone, never on stored
        state, so concurrent writers need no read-modify-write. ``turn_id`` and ``prompt``
        (the JSON of what the model was sent) are carried through as they are."""
        config, tokenizer = self.config, self.tokenizer
        # An empty reply (tool calls only) is remembered as what was done; a huge one is
        # cut in the middle so one reply cannot bloat the session.
        action = action_of(turn, config.summary)
        final = turn.assistant if turn.assistant.strip() else action
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


def _tool_tokens(turn: Turn, tokenizer: Tokenizer) -> int:
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
        entries.append({"type": "tool_call", "call_id": call_id, "tool": call.name, "arguments": arguments})
        entries.append({"type": "tool_result", "call_id": call_id, "tool": call.name, "ok": call.ok, "result": result})
    entries.append({"type": "assistant", "content": reply})
    return tuple(entries)


def is_valid_chat(messages: Sequence[Mapping[str, Any]]) -> bool:
    """True for what every chat provider accepts: an optional system message, then
    non-empty user/assistant messages alternating from user and ending with user."""
    body = list(messages)
    if body and body[0].get("role") == "system":
        if not isinstance(body[0].get("content"), str) or not body[0]["content"].strip():
            return False
        body = body[1:]
    if not body or body[-1].get("role") != "user":
        return False
    for index, message in enumerate(body):
        expected = "user" if index % 2 == 0 else "assistant"
        content = message.get("content")
        if message.get("role") != expected or not isinstance(content, str) or not content.strip():
            return False
    return True
