"""Token savings on BFCL conversations, strategy by strategy, with an information measure.

Every strategy sees the same conversation: the same system prompt (the
middleware's static prefix), the same user messages, the same assistant tool
calls, the same tool outputs (BFCL's own tools) and the same final replies.
Tool schemas are the same for every strategy and are left out of the counts.

Information measure, per turn: the argument values of that turn's reference
tool calls that the user did *not* write in that turn's message ("needed
values"; strings of 2+ characters and numbers of 2+ digits). A value is kept
when it appears in the composed prompt. The headline figure is the share kept
among the needed values the full history holds at all (the rest cannot be
recovered by any history strategy: they come from the tools' initial state).
"""

from __future__ import annotations

import hashlib
import json
import logging
import statistics
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from middleware import Config, SessionManager, ToolCall, load_config
from middleware.core.turnloop import valid_tool_sequence
from middleware.demo import CONFIG_PATH as ATLAS_PATH
from middleware.session.standalone import composer_for

from .dataset import Conversation, Turn

Messages = list[dict[str, Any]]
LAST_K = 10
INSTRUCTIONS = "Use the tools to carry out the user's requests, then say briefly what you did."


def bench_config(
    *, auto: bool, memory: dict[str, Any] | None = None, summary: dict[str, Any] | None = None, **context: Any
) -> Config:
    """The demo's Atlas config with a neutral system prompt (the same for every strategy);
    ``auto`` drops its tracked keys so every scalar argument becomes context; ``memory`` and
    ``summary`` override those sections."""
    base = load_config(ATLAS_PATH, env={})
    overrides: dict[str, Any] = {
        "assistant": {"name": "Assistant", "instructions": INSTRUCTIONS},
        "skills": [],
        "usage_log": {"path": None},
        "store": {"url": f"memory://bench-{uuid.uuid4().hex}"},
    }
    if auto:
        overrides["context"] = {"keys": None, "tools": None, "labels": {}, **context}
    if memory is not None:
        overrides["memory"] = memory
    if summary is not None:
        overrides["summary"] = summary
    return base.with_overrides(**overrides)


def call_id(seed: str) -> str:
    """A tool-call id shaped as a provider makes one (``call_`` and 8 hex digits), made from
    ``seed`` so that a rerun tokenizes the same: the scripted model's and the full-history
    chatbot's calls cost the same to resend."""
    return f"call_{hashlib.blake2b(seed.encode(), digest_size=4).hexdigest()}"


def turn_messages(turn: Turn, index: int) -> Messages:
    """A turn as a chatbot keeps it: user, assistant tool calls, tool results, final reply."""
    messages: Messages = [{"role": "user", "content": turn.user}]
    if turn.calls:
        ids = [call_id(f"{index}.{i}") for i in range(len(turn.calls))]
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for call_id, c in zip(ids, turn.calls, strict=True)]})  # fmt: skip
        messages += [{"role": "tool", "tool_call_id": i, "content": c.result} for i, c in zip(ids, turn.calls, strict=True)]
    messages.append({"role": "assistant", "content": turn.reply})
    return messages


# --- strategies --------------------------------------------------------------------


class Strategy:
    """Composes the prompt for a turn from what a chatbot using it would have."""

    name = ""
    label = ""

    def start(self) -> None:  # a new session
        pass

    def compose(self, system: str, history: Messages, current: str) -> Messages:
        raise NotImplementedError

    def finished(self, turn: Turn) -> None:  # the turn's reply is known
        pass


class FullHistory(Strategy):
    name, label = "full", "full history with tool details"

    def compose(self, system: str, history: Messages, current: str) -> Messages:
        return [{"role": "system", "content": system}, *history, {"role": "user", "content": current}]


class NoMemory(Strategy):
    """The floor no history strategy can beat: the system prompt and the current message."""

    name, label = "no_memory", "no memory (system + current message)"

    def compose(self, system: str, history: Messages, current: str) -> Messages:
        return [{"role": "system", "content": system}, {"role": "user", "content": current}]


class LastK(Strategy):
    name, label = "last_k", f"last {LAST_K} messages"

    def compose(self, system: str, history: Messages, current: str) -> Messages:
        window = history[-LAST_K:]
        while window and window[0]["role"] != "user":  # do not start on an orphan tool result
            window = window[1:]
        return [{"role": "system", "content": system}, *window, {"role": "user", "content": current}]


class _TrimFailures(logging.Handler):
    """litellm's trim_messages logs its own exceptions and returns the messages untrimmed;
    this counts those failures (and keeps their tracebacks off the console)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "trimming" in record.getMessage():
            self.count += 1


class LitellmTrim(Strategy):
    name, label = "litellm_trim", "litellm trim_messages"

    def __init__(self, max_tokens: int) -> None:
        from litellm.utils import trim_messages

        self.trim = trim_messages
        self.max_tokens = max_tokens
        self.label = f"litellm trim_messages (max_tokens={max_tokens})"
        self.failures = _TrimFailures()
        logger = logging.getLogger("LiteLLM")
        logger.handlers = [self.failures]
        logger.propagate = False

    def compose(self, system: str, history: Messages, current: str) -> Messages:
        full = [{"role": "system", "content": system}, *history, {"role": "user", "content": current}]
        before = self.failures.count
        result = self.trim([dict(m) for m in full], model="gpt-4o-mini", max_tokens=self.max_tokens)
        if self.failures.count > before:
            raise RuntimeError("litellm trim_messages failed and returned the messages untrimmed")
        return list(result[0] if isinstance(result, tuple) else result)


class LangchainTrim(Strategy):
    name, label = "langchain_trim", "LangChain trim_messages"

    def __init__(self, max_tokens: int, count: Callable[[Messages], int]) -> None:
        from langchain_core.messages import convert_to_messages, convert_to_openai_messages, trim_messages

        self.convert, self.back, self.trim = convert_to_messages, convert_to_openai_messages, trim_messages
        self.max_tokens, self.count = max_tokens, count
        self.label = f"LangChain trim_messages (last, max_tokens={max_tokens})"

    def compose(self, system: str, history: Messages, current: str) -> Messages:
        full = [{"role": "system", "content": system}, *history, {"role": "user", "content": current}]
        kept = self.trim(
            self.convert(full), max_tokens=self.max_tokens, strategy="last", include_system=True, start_on="human",
            token_counter=lambda ms: self.count(self.back(ms)), allow_partial=False,
        )  # fmt: skip
        return list(self.back(kept))


class Middleware(Strategy):
    def __init__(
        self,
        *,
        auto: bool,
        name: str = "",
        label: str = "",
        memory: dict[str, Any] | None = None,
        summary: dict[str, Any] | None = None,
        **context: Any,
    ) -> None:
        self.name = name or ("middleware_auto" if auto else "middleware")
        self.label = label or ("middleware, auto context keys" if auto else "middleware, Atlas demo settings")
        self.config = bench_config(auto=auto, memory=memory, summary=summary, **context)
        self.manager = SessionManager(self.config)
        self.session = ""

    def start(self) -> None:
        self.session = f"s-{uuid.uuid4().hex[:10]}"

    def compose(self, system: str, history: Messages, current: str) -> Messages:
        return self.manager.build_messages(self.session, current)

    def finished(self, turn: Turn) -> None:
        calls = [ToolCall(name=c.name, arguments=c.arguments, result=_result(c.result), ok=not c.result.startswith('{"error"'))
                 for c in turn.calls]  # fmt: skip
        self.manager.record_turn(self.session, user=turn.user, assistant=turn.reply, tool_calls=calls)


def _result(text: str) -> Any:
    """Tool outputs arrive as JSON text; the chatbot hands the middleware what it parsed."""
    try:
        return json.loads(text)
    except ValueError:
        return text


# --- information measure ---------------------------------------------------------------


def _values(value: Any) -> Iterable[str]:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _values(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _values(item)
    else:
        text = str(value)
        if len(text) >= 2:
            yield text


def needed_values(turn: Turn) -> set[str]:
    """Argument values of the turn's reference calls that its user message does not contain."""
    return {v for call in turn.calls for v in _values(call.arguments) if v not in turn.user}


def prompt_text(messages: Messages) -> str:
    """Everything a model reads in a prompt, tool-call arguments decoded."""
    parts = []
    for message in messages:
        if isinstance(message.get("content"), str):
            parts.append(message["content"])
        for call in message.get("tool_calls") or ():
            function = call.get("function", {})
            parts.append(function.get("name", ""))
            try:
                parts.extend(_values(json.loads(function.get("arguments") or "{}")))
            except ValueError:
                parts.append(str(function.get("arguments")))
    return "\n".join(parts)


def miss_source(value: str, history: Messages) -> str:
    """Where the full history holds a value the middleware's prompt lacks (latest place)."""
    for message in reversed(history):
        if message["role"] == "tool" and value in (message.get("content") or ""):
            return "earlier tool result"
        if message.get("tool_calls") and value in prompt_text([message]):
            return "earlier tool-call argument"
        if message["role"] == "user" and value in (message.get("content") or ""):
            return "earlier user message"
        if message["role"] == "assistant" and value in (message.get("content") or ""):
            return "earlier assistant reply"
    return "elsewhere"


@dataclass
class StrategyResult:
    name: str
    label: str
    tokens: list[int] = field(default_factory=list)  # per turn, in replay order
    by_position: dict[int, list[int]] = field(default_factory=dict)  # turn number in session -> tokens
    needed: int = 0
    kept: int = 0
    needed_in_full: int = 0
    kept_of_full: int = 0
    # Strict: among needed values found anywhere earlier in the whole session (user text,
    # tool arguments and results, replies), the share the prompt holds.
    strict_needed: int = 0
    strict_kept: int = 0
    # ... of which the current task's own history holds none: held only by another task's turns.
    elsewhere_needed: int = 0
    elsewhere_kept: int = 0
    valid: int = 0
    errors: int = 0  # turns on which the strategy raised (then the full history is counted)
    over_budget: int = 0  # prompts larger than the strategy's own max_tokens
    misses: Counter[str] = field(default_factory=Counter)
    strict_misses: Counter[str] = field(default_factory=Counter)

    def add(self, position: int, tokens: int) -> None:
        self.tokens.append(tokens)
        self.by_position.setdefault(position, []).append(tokens)

    def mean_at(self, positions: range) -> float:
        values = [t for p in positions for t in self.by_position.get(p, [])]
        return statistics.mean(values) if values else 0.0


def replay(
    sessions: Sequence[Sequence[Conversation]],
    strategies: Sequence[Strategy],
    *,
    progress: Callable[[int], None] = lambda _: None,
) -> dict[str, StrategyResult]:
    """Play each session (a list of conversations) through every strategy."""
    system = composer_for(bench_config(auto=True)).static_prefix
    tokenizer = composer_for(bench_config(auto=True)).tokenizer
    results = {s.name: StrategyResult(s.name, s.label) for s in strategies}
    for session in sessions:
        for strategy in strategies:
            strategy.start()
        history: Messages = []
        history_text = ""  # everything the session's full history holds, as text
        position = 0
        for conversation in session:
            # Values count as held by the history only if this conversation's own earlier
            # turns hold them: in a chain, an unrelated earlier task that happens to name
            # the same file is not history the current task needs.
            own: Messages = []
            for turn in conversation.turns:
                position += 1
                needed = needed_values(turn)
                prompts = {}
                for strategy in strategies:
                    try:
                        prompts[strategy.name] = strategy.compose(system, history, turn.user)
                    except Exception:  # a peer that crashes on this input: count it, send everything
                        results[strategy.name].errors += 1
                        prompts[strategy.name] = FullHistory().compose(system, history, turn.user)
                own_text = prompt_text([{"role": "system", "content": system}, *own, {"role": "user", "content": turn.user}])
                in_full = {v for v in needed if v in own_text}
                in_session = {v for v in needed if v in history_text}
                for strategy in strategies:
                    messages = prompts[strategy.name]
                    result = results[strategy.name]
                    tokens = tokenizer.count_messages(messages)
                    result.add(position, tokens)
                    limit = getattr(strategy, "max_tokens", None)
                    result.over_budget += limit is not None and tokens > limit
                    text = prompt_text(messages)
                    kept = {v for v in needed if v in text}
                    result.needed += len(needed)
                    result.kept += len(kept)
                    result.needed_in_full += len(in_full)
                    result.kept_of_full += len(kept & in_full)
                    result.strict_needed += len(in_session)
                    result.strict_kept += len(kept & in_session)
                    result.elsewhere_needed += len(in_session - in_full)
                    result.elsewhere_kept += len(kept & (in_session - in_full))
                    if strategy.name != "full":
                        result.strict_misses.update(miss_source(value, history) for value in in_session - kept)
                    result.valid += valid_tool_sequence(messages) and messages[-1].get("role") == "user"
                    if strategy.name != "full":
                        for value in in_full - kept:
                            result.misses[miss_source(value, own)] += 1
                own += turn_messages(turn, position)
                history += turn_messages(turn, position)
                history_text += "\n" + prompt_text(turn_messages(turn, position))
                for strategy in strategies:
                    strategy.finished(turn)
                progress(1)
    return results


def summary_rows(results: dict[str, StrategyResult]) -> list[dict[str, Any]]:
    full_total = sum(results["full"].tokens)
    rows = []
    for result in results.values():
        total = sum(result.tokens)
        rows.append({
            "strategy": result.label,
            "name": result.name,
            "total_tokens": total,
            "median_tokens": statistics.median(result.tokens),
            "reduction": 1 - total / full_total,
            "kept_all": result.kept / result.needed if result.needed else 1.0,
            "kept_of_full": result.kept_of_full / result.needed_in_full if result.needed_in_full else 1.0,
            "strict": result.strict_kept / result.strict_needed if result.strict_needed else 1.0,
            "strict_needed": result.strict_needed,
            "elsewhere": result.elsewhere_kept / result.elsewhere_needed if result.elsewhere_needed else 1.0,
            "elsewhere_needed": result.elsewhere_needed,
            "valid": result.valid / len(result.tokens),
            "errors": result.errors,
            "over_budget": result.over_budget,
            "turns": len(result.tokens),
            "turn20": result.mean_at(range(18, 23)),
            "turn100": result.mean_at(range(98, 103)),
        })  # fmt: skip
    return rows


def measure_scope(scope: str, quick: bool) -> dict[str, Any]:
    """Section 1's figures for one scope ("single": the conversations as they are; "chains":
    sessions of 100+ turns; "long": those with large tool outputs), played in a process of
    its own by ``python -m benchmarks`` (every strategy is made here, so the scopes share
    nothing)."""
    from .dataset import LONG_OUTPUTS, chains, load

    min_turns = 30 if quick else 100
    if scope == "long":
        sessions = chains(load(limit=40 if quick else None, category=LONG_OUTPUTS), min_turns=min_turns)
    else:
        conversations = load(limit=40 if quick else None)
        sessions = [[c] for c in conversations] if scope == "single" else chains(conversations, min_turns=min_turns)
    counter = composer_for(bench_config(auto=True)).tokenizer.count_messages
    ours = replay(sessions, [FullHistory(), Middleware(auto=True)])
    budget = int(statistics.median(ours["middleware_auto"].tokens))
    strategies = [
        FullHistory(), NoMemory(), LastK(), LitellmTrim(budget), LangchainTrim(budget, counter),
        Middleware(auto=False), Middleware(auto=True),
        Middleware(auto=True, name="middleware_results", label="middleware, auto keys + from_results", from_results=True),
    ]  # fmt: skip
    results = replay(sessions, strategies)
    outputs = sorted(len(c.result) for s in sessions for conv in s for t in conv.turns for c in t.calls)
    return {
        "sessions": len(sessions),
        "output_chars": {"median": statistics.median(outputs), "p90": outputs[int(len(outputs) * 0.9)], "max": outputs[-1]},
        "session_turns": sorted(sum(len(c.turns) for c in s) for s in sessions),
        "budget": budget,
        "rows": summary_rows(results),
        "misses": {n: dict(results[n].misses) for n in ("middleware", "middleware_auto", "middleware_results")},
        "by_position": {n: {p: statistics.mean(v) for p, v in r.by_position.items()} for n, r in results.items()},
    }
