"""The composer: session state + current message -> OpenAI-format messages. No I/O.

Message order::

    system     static instructions and skills first, then the notes, the keys set
               earlier, the Current Context section, and the volatile sections last
    user       "[Previous conversation summary]\\n• … → …"   } only when older turns exist
    assistant  "Understood."                                 }
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
from dataclasses import dataclass
from typing import Any, Protocol

from ..config.schema import Config
from ..config.sections import KEY_NAME, Skill
from ..exceptions import TokenBudgetError
from .archive import Candidate, Recalled, query_terms, rank, recall_step, render_recall
from .context import order_context, quoted_value, render_context, render_earlier
from .lexical import terms
from .notes import cut_notes, render_notes
from .recording import MAX_TOOLS_RECORDED, TOKENS_PER_MESSAGE, turn_messages, turn_update
from .state import (
    Prompt,
    SessionState,
    StoredMessage,
    TokenBreakdown,
    Turn,
    TurnUpdate,
    built,
    check_user_message,
    compact_json,
    whole_pairs,
)
from .text import CUT_MARKER, one_line, squeeze_blank_lines

__all__ = [
    "MAX_TOOLS_RECORDED",
    "REPLY_PRIMING",
    "TOKENS_PER_MESSAGE",
    "Composer",
    "Tokenizer",
    "is_valid_chat",
    "render_skills",
    "turn_messages",
]

# litellm's message arithmetic: 3 more tokens priming the reply (3 per message: see recording).
REPLY_PRIMING = 3


class Tokenizer(Protocol):
    """What the composer counts with (``middleware.tokens.Tokenizer`` is one)."""

    encoding_name: str

    def count(self, text: str) -> int: ...

    def count_chat(self, role: str, content: str) -> int: ...

    def cut_middle(self, text: str, max_tokens: int, marker: str) -> str: ...

    def count_message(self, message: Mapping[str, Any]) -> int: ...


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


_BLOCKS = ("context", "state", "notes", "recall", "summary")


@dataclass
class _Memory:
    """The memory blocks of one prompt while they are fitted under memory.context_limit."""

    lines: list[str]
    context: dict[str, str]
    earlier: dict[str, str]
    notes: str
    notes_cap: int
    state_lines: list[str]
    recall: list[Recalled]


def _without_oldest(keys: dict[str, str]) -> dict[str, str]:
    """Context keys (in the order they were set) less the one set first."""
    return dict(list(keys.items())[1:])


# Characters of a connector's line the prompt shows at most.
_STATE_LINE_CHARS = 300


def _state_line(line: str) -> str:
    """A connector's line (``name: text``) as the prompt shows it: the name bare, the text
    what it observed of the world (a screen, an email subject), quoted as context values
    are (a JSON string unless one plain word), so it reads as data, never as an instruction;
    a line without an identifier for a name is quoted whole."""
    text = one_line(line, _STATE_LINE_CHARS)
    name, colon, observed = text.partition(": ")
    if colon and KEY_NAME.fullmatch(name):
        return f"- {name}: {quoted_value(observed, _STATE_LINE_CHARS)}"
    return f"- {compact_json(text)}"


def render_state(lines: Sequence[str], header: str) -> str:
    """The connectors' section: their current-state lines, each one line, quoted."""
    return "\n".join([header, *map(_state_line, lines)]) if lines else ""


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

    def system_prompt(
        self, context: Mapping[str, str], notes_section: str = "", *volatile: str, earlier: Mapping[str, str] | None = None
    ) -> str:
        """Static prefix, then the notes section, the keys set earlier, the Current Context
        section, then the volatile sections (connectors' state, the recall block): what
        changes most comes last."""
        return self._system(context, notes_section, volatile, earlier or {})[0]

    def _system(
        self, context: Mapping[str, str], notes_section: str, volatile: tuple[str, ...], earlier: Mapping[str, str]
    ) -> tuple[str, int]:
        """The system text, and where its part that changes least ends: the static prefix,
        the notes and the keys set earlier (0: neither)."""
        key = (tuple(context.items()), notes_section, volatile, tuple(earlier.items()))
        return self._systems.get_or(key, lambda: self._render_system(context, notes_section, volatile, earlier))  # type: ignore[no-any-return]

    def _render_system(
        self, context: Mapping[str, str], notes_section: str, volatile: tuple[str, ...], earlier: Mapping[str, str]
    ) -> tuple[str, int]:
        config = self.config.context
        section = render_context(order_context(context, config), config)
        before = render_earlier(order_context(earlier, config), config) if earlier else ""
        settled = "\n".join(part for part in (self.static_prefix, notes_section, before) if part)
        return "\n".join(part for part in (settled, section, *volatile) if part), len(settled) if notes_section or before else 0

    def notes_section(self, notes: str, max_tokens: int) -> str:
        """The quoted notes section within ``max_tokens`` (cut in the middle beyond), or ""."""
        if not notes.strip() or max_tokens <= 0:
            return ""

        def make() -> str:
            rendered = render_notes(notes, self.config.notes.header)
            if self.tokenizer.count(rendered) <= max_tokens:
                return rendered
            return cut_notes(rendered, self.config.notes.header, max_tokens, self.tokenizer)

        return self._notes.get_or((notes, max_tokens), make)  # type: ignore[no-any-return]

    def _summary_messages(self, lines: Sequence[str]) -> list[dict[str, str]]:
        if not lines:
            return []
        summary = self.config.summary
        # Each line one line (a state built by hand may hold line breaks: a line cannot start
        # a heading); what the store holds is one line already, the fast path.
        text = self._summaries.get_or(tuple(lines), lambda: "\n".join([summary.header, *map(one_line, lines)]))
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

    def _fit_memory(self, parts: _Memory, budget: int) -> list[str]:
        """Keep every memory block within ``budget`` tokens together. What gives first is
        the last block of ``memory.priorities``, one step at a time: a summary line (oldest
        first), a recalled item (lowest score first), the notes (cut in the middle, then
        dropped), a connector line (last first), a context key (least recently set first)."""
        done: list[str] = []
        sizes = {block: self._block_tokens(parts, block) for block in _BLOCKS}
        order = list(reversed(self.config.memory.priorities))
        while sum(sizes.values()) > budget:
            block = next((b for b in order if self._shrink(parts, b, budget - sum(sizes.values()) + sizes[b], done)), None)
            if block is None:
                break
            sizes[block] = self._block_tokens(parts, block)
        return done

    def _block_tokens(self, parts: _Memory, block: str) -> int:
        count = self.tokenizer.count
        if block == "summary":
            return self._count(self._summary_messages(parts.lines))
        if block == "notes":
            return count(self.notes_section(parts.notes, parts.notes_cap))
        if block == "context":
            config = self.config.context
            earlier = count(render_earlier(order_context(parts.earlier, config), config)) if parts.earlier else 0
            return count(render_context(order_context(parts.context, config), config)) + earlier
        if block == "state":
            return count(render_state(parts.state_lines, self.config.memory.state_header))
        return count(render_recall(parts.recall, self.config.memory.recall_header))

    def _shrink(self, parts: _Memory, block: str, room: int, done: list[str]) -> bool:
        """Take one step off ``block`` (``room``: the tokens it may keep); False when it has nothing left."""
        if block == "summary" and parts.lines:
            parts.lines = parts.lines[1:]
            done.append("summary_line_dropped")
        elif block == "recall" and parts.recall:
            parts.recall, step = recall_step(parts.recall)
            done.append(step)
        elif block == "notes" and parts.notes_cap and parts.notes.strip():
            cut = room if room >= 24 and room < parts.notes_cap else 0  # too little room for useful notes: leave them out
            parts.notes_cap = cut
            done.append("notes_cut" if cut else "notes_dropped")
        elif block == "state" and parts.state_lines:
            parts.state_lines = parts.state_lines[:-1]
            done.append("state_line_dropped")
        elif block == "context" and parts.earlier:  # the keys set earlier go first, oldest first
            parts.earlier = _without_oldest(parts.earlier)
            done.append("earlier_key_dropped")
        elif block == "context" and parts.context:
            parts.context = _without_oldest(parts.context)
            done.append("context_key_dropped")
        else:
            return False
        return True

    def earlier_within(self, earlier: Mapping[str, str]) -> tuple[dict[str, str], int]:
        """The keys set earlier that the prompt shows, and the tokens of their section.

        They share ``memory.recall_tokens`` with the recall block and come first: values
        from long ago that were set as arguments, one short line each. Values longer than
        ``context.earlier_value_chars`` are left out (the archive recalls them); the oldest
        give until the section fits."""
        config, count = self.config.context, self.tokenizer.count
        kept = {k: v for k, v in earlier.items() if len(v) <= config.earlier_value_chars}
        room = self.config.memory.recall_tokens
        while kept:
            tokens = count("\n" + render_earlier(order_context(kept, config), config))
            if tokens <= room:
                return kept, tokens
            kept = _without_oldest(kept)
        return kept, 0

    def recall(
        self,
        state: SessionState,
        current: str,
        candidates: Sequence[Candidate],
        recent: Sequence[Mapping[str, str]],
        budget: int,
    ) -> list[Recalled]:
        """What the recall block holds for ``current``: ranked candidates and earlier
        values of context keys within ``budget`` tokens (what the keys set earlier leave
        of ``memory.recall_tokens``; see ``archive.rank``)."""
        if budget <= 0 or not (candidates or state.facts):
            return []
        shown = [*state.summary, *(m["content"] for m in recent), current, *state.context.values(), *state.earlier.values()]
        return rank(candidates, state.facts, query=query_terms(current, recent), context=state.context, turns=state.turns,
                    shown=shown, budget=budget, count=self.tokenizer, recent_turns=len(recent) // 2,
                    asked_before={t for m in recent if m.get("role") == "user" for t in terms(m.get("content", ""))})  # fmt: skip

    def compose(
        self,
        state: SessionState,
        user_message: str,
        *,
        budget: int | None = None,
        extra_tokens: int = 0,
        checked: bool = False,
        candidates: Sequence[Candidate] = (),
        state_lines: Sequence[str] = (),
    ) -> Prompt:
        """The messages to send for ``user_message`` and their token figures.

        ``budget`` (default ``config.tokens.budget``) caps the prompt in tokens, counting
        ``extra_tokens`` sent beside the messages (tool schemas). The system prompt and the
        current message are never cut; if they alone exceed the budget, TokenBudgetError.
        ``checked``: the caller already ran ``check_user_message`` on the message.
        ``candidates``: archived pieces the store found for the message (recall);
        ``state_lines``: connectors' current-state lines.
        """
        config, tokenizer = self.config, self.tokenizer
        budget = budget if budget is not None else config.tokens.budget
        current = user_message if checked else check_user_message(user_message, limit=config.tokens.max_message_chars)
        static_tokens = self.static_tokens
        recent = _recent_pairs(state, tokenizer)[-config.recent.messages :] if config.recent.messages else []
        earlier, earlier_tokens = self.earlier_within(state.earlier)
        parts = _Memory(
            lines=list(state.summary[-config.summary.lines :]) if config.summary.lines else [],
            context=dict(state.context),
            earlier=earlier,
            notes=state.notes,
            notes_cap=config.notes.max_tokens,
            state_lines=list(state_lines),
            recall=self.recall(
                state, current, candidates, [m.as_dict() for m in recent], config.memory.recall_tokens - earlier_tokens
            ),
        )
        limit = config.memory.context_limit if config.memory.context_limit is not None else config.tokens.memory_budget
        trimmed = self._fit_memory(parts, limit) if limit is not None else []
        notes = self.notes_section(parts.notes, parts.notes_cap)
        state_section = render_state(parts.state_lines, config.memory.state_header)
        system, settled = self._system(parts.context, notes, (state_section,), parts.earlier)
        system_tokens = tokenizer.count_chat("system", system)
        current_tokens = tokenizer.count_chat("user", current)
        summary = self._summary_messages(parts.lines)
        summary_tokens = self._count(summary)
        recent_tokens = sum(m.tokens for m in recent)
        recall_section = render_recall(parts.recall, config.memory.recall_header)
        recall_tokens = tokenizer.count("\n" + recall_section) if recall_section else 0
        if budget is not None:
            fixed = system_tokens + current_tokens + REPLY_PRIMING + extra_tokens
            while parts.earlier and fixed > budget:  # the keys set earlier give before the budget fails
                parts.earlier = _without_oldest(parts.earlier)
                trimmed.append("earlier_key_dropped")
                system, settled = self._system(parts.context, notes, (state_section,), parts.earlier)
                system_tokens = tokenizer.count_chat("system", system)
                fixed = system_tokens + current_tokens + REPLY_PRIMING + extra_tokens
            if fixed > budget:
                raise TokenBudgetError(
                    f"The prompt needs {fixed:,} tokens before any history (system prompt {system_tokens:,}, "
                    f"current message {current_tokens:,}, tool schemas {extra_tokens:,}); the budget is {budget:,}. "
                    "Shorten the message or raise tokens.budget."
                )
            while parts.recall and fixed + recall_tokens + summary_tokens + recent_tokens > budget:  # recall gives first
                parts.recall, step = recall_step(parts.recall)
                trimmed.append(step)
                recall_section = render_recall(parts.recall, config.memory.recall_header)
                recall_tokens = tokenizer.count("\n" + recall_section) if recall_section else 0
            if fixed + recall_tokens + summary_tokens + recent_tokens > budget:  # only then is there anything to cut
                lines, recent, cut = self._fit(parts.lines, list(recent), budget - fixed - recall_tokens)
                trimmed += cut
                summary = self._summary_messages(lines)
                summary_tokens = self._count(summary)
                recent_tokens = sum(m.tokens for m in recent)
        if recall_section:
            system, settled = self._system(parts.context, notes, (state_section, recall_section), parts.earlier)
            system_tokens = tokenizer.count_chat("system", system)
        messages = [
            {"role": "system", "content": system},
            *summary,
            *({"role": m.role, "content": m.content} for m in recent),
            {"role": "user", "content": current},
        ]
        notes_tokens = tokenizer.count("\n" + notes) if notes else 0
        state_tokens = tokenizer.count("\n" + state_section) if state_section else 0
        recall_tokens = min(recall_tokens, max(system_tokens - static_tokens - notes_tokens - state_tokens, 0))
        context_tokens = system_tokens - static_tokens - notes_tokens - state_tokens - recall_tokens
        if context_tokens < 0:
            # A section counted apart can take a token more than it does in the prompt, where it
            # merges with its neighbour: that token comes off the section, so no layer is negative
            # and the layers still sum to the prompt (found: "context": -1 on the demo's first call).
            short = -context_tokens
            state_tokens, short = max(state_tokens - short, 0), max(short - state_tokens, 0)
            recall_tokens, short = max(recall_tokens - short, 0), max(short - recall_tokens, 0)
            notes_tokens, context_tokens = notes_tokens - short, 0
        breakdown = built(
            TokenBreakdown,
            system=static_tokens,
            notes=notes_tokens,
            state=state_tokens,
            recall=recall_tokens,
            context=context_tokens,
            summary=summary_tokens,
            recent=recent_tokens,
            current=current_tokens,
            priming=REPLY_PRIMING,
        )
        full = static_tokens + state.full_tokens + current_tokens + REPLY_PRIMING
        # The volatile sections come last, each after a newline (see system_prompt).
        stable = max(len(system) - sum(len(part) + 1 for part in (state_section, recall_section) if part), 0)
        return built(
            Prompt, messages=messages, tokens=breakdown, full_history_tokens=full, turn=state.turns + 1, trimmed=tuple(trimmed),
            recalled=tuple(parts.recall), stable_system_chars=stable,
            settled_system_chars=settled,
        )  # fmt: skip

    def apply_turn(self, turn: Turn, *, turn_id: str = "", prompt: str = "", observed: Sequence[str] = ()) -> TurnUpdate:
        """What recording ``turn`` writes (see ``middleware.core.recording.turn_update``)."""
        return turn_update(turn, self.config, self.tokenizer, turn_id=turn_id, prompt=prompt, observed=observed)


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
