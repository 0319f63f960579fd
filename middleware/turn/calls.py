"""A turn's LLM calls, whoever makes them: the request each carries (from the turn plan),
the usage line it leaves, what the turn answers itself between calls, and tool results
kept within the budget. ``chat()``, wrapped chatbots and the endpoint differ only in how a
call is made and who runs the tools the model asks for."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..core.replies import call_key, round_ids
from ..core.text import CUT_MARKER
from ..core.turnloop import PendingCall, ToolOutcome, TurnLoop
from ..events import log
from ..session.engine import Engine
from ..usage.sink import CallMade
from .plan import Request, TurnPlan

__all__ = ["Calls", "answered"]


# A tool result is cut to fit the budget no shorter than this many tokens.
CUT_FLOOR = 64
# What a tool result of an earlier round reads once it is cleared to fit the budget (the
# oldest first, when cutting the largest ones to CUT_FLOOR is not enough).
CLEARED = "[…cut to fit the token budget…]"
# Tokens kept for the turn's own answer to a call (the loader's line), when it checks the room left.
ANSWER_ROOM = 100


def answered(call: PendingCall, content: str | list[dict[str, str]]) -> ToolOutcome:
    """A tool message the turn answers itself (its text, or the tool references of a load),
    not remembered as a tool call."""
    return ToolOutcome(message={"role": "tool", "tool_call_id": call.id, "content": content}, record=None)


class Calls:
    """The calls of one turn under ``plan``, reported through ``engine`` as ``kind``.

    ``loop`` holds the messages so far (the prompt, then the tool loop). A turn that spans
    requests (the endpoint's) resumes with the breakpoint its last call ``marked``, whether
    that call only loaded schemas (``extra``), how many calls it made (``step``), the ids
    of the calls it answered itself (``answered``), what its first call carried and cost
    (``first``) and the results it cut to fit, as they came (``whole``)."""

    def __init__(
        self, engine: Engine, plan: TurnPlan, kind: str, loop: TurnLoop, *, marked: int | None = None, extra: bool = False,
        step: int = 0, answered: Sequence[str] = (), first: dict[str, Any] | None = None, whole: Mapping[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.engine, self.plan, self.kind, self.loop = engine, plan, kind, loop
        self.marked, self.extra, self.step = marked, extra, step
        self.answered = list(answered)  # the calls the turn answered itself (the loader's), by replies.call_key
        self.first = first  # what the turn's first call carried and cost, for the inspector
        self.lines: list[dict[str, Any]] = []  # the usage lines written, one per call
        self.whole = dict(whole or {})  # the text of each tool result cut to fit, by replies.call_key, as it came
        self.cleared: set[str] = set()  # the results cleared to fit (``CLEARED``), by replies.call_key

    def request(self) -> Request:
        """The next call's request (see ``TurnPlan.request``)."""
        request = self.plan.request(self.loop.messages, marked=self.marked, loaded=self.extra)
        self.marked = request.tail
        return request

    def made(
        self, request: Request, reply: Mapping[str, Any], usage: Any, latency: float, *, model: str | None = None,
        priced: bool = True, error: int | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """Report a call made with ``request``; returns its usage line."""
        plan, prompt_length = self.plan, len(self.plan.prompt.messages)
        loop = request.messages[prompt_length:]
        full = None if self.extra else plan.full_tokens(loop, self._ran(loop), self.engine.tokenizer.count_message)
        call = CallMade(kind=self.kind, session=plan.session_id, turn=plan.prompt.turn, step=self.step, model=model or plan.model,
                        priced=priced, prompt=plan.prompt, sent=request.messages, schemas=request.schemas, reply=reply,
                        usage=usage, latency=latency, full_tokens=full, tools=plan.tools_line(request.schemas),
                        static_prefix=plan.static_prefix, error=error)  # fmt: skip
        line = self.engine.call_made(call, after_results=len(request.messages) > prompt_length, offered=bool(request.schemas),
                                     loaded=self.extra)  # fmt: skip
        if self.first is None:
            self.first = {"tools": line.get("tools"), "cache": line.get("cache")}
        self.step += 1
        self.lines.append(line)
        return line

    def _ran(self, loop: Sequence[Mapping[str, Any]]) -> list[str]:
        """The tool calls in ``loop`` that ran (the turn's own answers aside), by ``call_key``."""
        rounds = [m for m in loop if m.get("role") == "assistant"]
        return [call_key(number, str(call.get("id"))) for number, m in enumerate(rounds) for call in m.get("tool_calls") or ()
                if call.get("id") not in round_ids(self.answered, number)]  # fmt: skip

    def _round(self) -> int:
        """The last round of the turn's tool loop (the assistant messages of the loop, less one)."""
        messages = self.loop.messages[len(self.plan.prompt.messages) :]
        return sum(1 for m in messages if m.get("role") == "assistant") - 1

    def answer(self, call: PendingCall, problem: Callable[[str, Any], str | None]) -> ToolOutcome | None:
        """The turn's own answer to ``call`` (the loader, a tool whose schema was not sent),
        or None when it is to be run."""
        content = self.plan.answer(call, problem, self._room)
        if content is None:
            return None
        self.answered.append(call_key(self._round(), call.id))
        return answered(call, content)

    def _room(self) -> int | None:
        """The tokens the budget leaves beside the next call's messages and schemas, its tool
        results counted as far as ``fit`` may cut them (an answer of the turn's own aside,
        about ``ANSWER_ROOM``); None without a budget."""
        budget = self.engine.budget(self.plan.model)
        if budget is None:
            return None
        tokenizer, loop = self.engine.tokenizer, self.loop
        cuttable = sum(max(tokenizer.count(m["content"]) - CUT_FLOOR, 0) for m in loop.loop_messages
                       if m.get("role") == "tool" and isinstance(m.get("content"), str))  # fmt: skip
        used = tokenizer.count_messages(loop.messages) - cuttable + self.plan.policy.counter.tokens(self.plan.schemas())
        return budget - used - ANSWER_ROOM

    def round_done(self, outcomes: Sequence[ToolOutcome]) -> None:
        """A round of tool results is in: the next call is one a full-history chatbot would
        not make when the round only loaded schemas."""
        self.extra = all(outcome.record is None for outcome in outcomes)

    def fit(self) -> None:
        """Keep the next call within the budget: cut the largest tool results in the middle,
        no shorter than ``CUT_FLOOR`` tokens; where that is not enough (a long loop of small
        results), clear the results of earlier rounds to ``CLEARED``, the oldest first (the
        latest round's, which the model has not read, stay). A call is remembered with the
        text sent, and valued by the text as it came. What is still over (the prompt, the
        schemas, the calls' own arguments, the latest results) is sent, with a warning."""
        budget = self.engine.budget(self.plan.model)
        if budget is None:
            return
        tokenizer, loop = self.engine.tokenizer, self.loop
        results = [i for i in range(loop.prompt_length, len(loop.messages))
                   if loop.messages[i].get("role") == "tool" and isinstance(loop.messages[i].get("content"), str)]  # fmt: skip
        sizes = {i: tokenizer.count(loop.messages[i]["content"]) for i in results}
        rounds, round_ = {}, -1  # each result's round (see ``_round``), in one pass
        for i in range(loop.prompt_length, len(loop.messages)):
            round_ += loop.messages[i].get("role") == "assistant"
            rounds[i] = round_
        tools_tokens = self.plan.policy.counter.tokens(self.plan.schemas())
        # Each text counted once: a message's content counts apart from the rest of it, so
        # what a cut saves comes off the total (a client may send thousands of results).
        over = tokenizer.count_messages(loop.messages) + tools_tokens - budget
        for at in sorted(results, key=lambda i: -sizes[i]):  # the largest first
            if over <= 0 or sizes[at] <= CUT_FLOOR:
                break
            cut = tokenizer.cut_middle(loop.messages[at]["content"], max(sizes[at] - over, CUT_FLOOR), CUT_MARKER)
            self._cut(at, cut, rounds[at])
            size = tokenizer.count(cut)
            over -= sizes[at] - size
            sizes[at] = size
        cleared = tokenizer.count(CLEARED)
        for at in results:  # the oldest first; the latest round's, which the model has not read, never
            if over <= 0 or rounds[at] == round_:
                break
            if sizes[at] > cleared:
                self._cut(at, CLEARED, rounds[at])
                over -= sizes[at] - cleared
        if over > 0:
            log.warning("turn.over_budget", session=self.plan.session_id, model=self.plan.model, budget=budget, over=over,
                        schemas=tools_tokens, hint="what is never cut (prompt, schemas, call arguments, the latest results "
                        f"cut to {CUT_FLOOR} tokens each) exceeds it")  # fmt: skip

    def _cut(self, at: int, text: str, round_: int) -> None:
        """Send ``text`` for the tool result at ``at`` of the loop's messages (of round
        ``round_``), its whole text kept (the first time it is cut) and the call remembered
        with the text sent."""
        loop = self.loop
        result = loop.messages[at]
        call_id = str(result.get("tool_call_id") or "")
        key = call_key(round_, call_id)
        if key not in self.whole and call_id not in self.whole:  # cut before (saved by its bare id, maybe): kept as it came
            self.whole[key] = result["content"]
        result["content"] = text
        if text == CLEARED:
            self.cleared.add(key)
        if at in loop.recorded:  # by place, not call id (a model may reuse an id across rounds)
            index = loop.recorded[at]
            loop.calls[index] = dataclasses.replace(loop.calls[index], result_sent=text)
