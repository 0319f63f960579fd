"""Planning and finishing a turn, the same for every entrance: load the session, choose the
tools the turn discloses, compose the prompt, apply the tool policy (``plan``); report each
call (``made``); learn from the turn and record it (``finish``)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

from ..config.schema import Config
from ..core.archive import Candidate
from ..core.composer import REPLY_PRIMING
from ..core.disclosure import DisclosedTools
from ..core.effects import Program
from ..core.policy import Figures, MemorySize, resends
from ..core.resend import resendable, resent_prompt
from ..core.state import Prompt, SessionState, Turn, TurnUpdate
from ..lru import Lru
from ..session.embedder import Embedder
from ..session.operations import SessionOperations, prompt_json
from ..session.tools import ToolPlanner
from ..store.decoding import Loaded
from ..tools import Toolset
from ..usage.sink import CallMade, UsageSink
from .plan import TurnPlan, rebased

__all__ = ["TurnPlanner"]

_NOTED = 4096  # sessions whose memory a planner remembers noting (``TurnPlanner._note_memory``)


class TurnPlanner:
    """See the module docstring. It works with the engine's collaborators: the session
    operations (``ops``), tool planning (``tools``), embeddings (``embedder``) and the
    usage ``sink``."""

    def __init__(self, config: Config, ops: SessionOperations, tools: ToolPlanner, embedder: Embedder, sink: UsageSink) -> None:
        self.config, self.ops, self.tools, self.embedder, self.sink = config, ops, tools, embedder, sink
        self.memory = MemorySize()  # learned: what a composed prompt's memory takes once a turn left the window
        self._noted: Lru[bool] = Lru(_NOTED)  # the sessions last noted in it (a retried turn is not noted again)

    def plan(
        self,
        session_id: str,
        message: str,
        *,
        model: str,
        toolset: Toolset,
        exact: bool = False,
        disclose: bool = True,
        loaded: Loaded | None = None,
        system: str | None = None,
        saved: Mapping[str, Any] | None = None,
        refer: bool = True,
    ) -> Program[TurnPlan]:
        """The plan of a turn of ``session_id`` for ``message`` (both checked) to ``model``
        with ``toolset``. ``exact``: the schemas as given (a chatbot handed its own tools);
        ``disclose`` False: every schema on every call (a caller that cannot answer the loader).
        The endpoint passes the session it ``loaded`` (with its arrival), the client's own
        ``system`` text, and for a turn that spans requests the tools it ``saved``. ``refer``
        False: the loader's answers reference nothing (a call that goes out through an
        ``api_base`` of the caller's, or one a wrapped chatbot makes itself)."""
        ops, tools = self.ops, self.tools
        catalog, policy = tools.catalog(toolset) if disclose else None, tools.policy(model)
        vector = yield from self.embedder.meaning(catalog, message)
        if loaded is None:
            loaded = yield from ops.load(session_id, message, traces=self.reads_traces(model))
        state, candidates = loaded.state, loaded.candidates
        every, count = toolset.schemas, tools.counter.tokens
        whole = count(every)
        disclosed: DisclosedTools | None = None
        if catalog is not None:
            disclosed = (DisclosedTools.restored(catalog, saved["tools"]) if saved and saved.get("tools") is not None
                         else None if saved else tools.select(catalog, state, message, policy=policy, whole_tokens=whole,
                                                              exact=exact, vector=vector, budget=self._room(model, message, system)))  # fmt: skip
        extra = count(disclosed.schemas() if disclosed is not None else every)
        if saved and isinstance(saved.get("schema_tokens"), int):  # as the turn's first request composed it
            extra = saved["schema_tokens"]
        prompt, static = yield from self._prompt(state, message, model, extra, candidates, system)
        plan = TurnPlan(session_id=session_id, message=message, model=model, prompt=prompt, policy=policy, static_prefix=static,
                        every=tuple(every), full_tools_tokens=whole, tools=disclosed,
                        max_rounds=self.config.max_tool_rounds, loop_odds=tools.loop_odds, schema_tokens=extra,
                        refers=refer and disclosed is not None and tools.refers(model),
                        companions=functools.partial(tools.companions, catalog) if catalog is not None else None)  # fmt: skip
        if not saved and state.turns == self.config.recent.turns + 1:  # the session's first turn past the window
            self._note_memory(session_id, prompt)
        if saved:
            if saved.get("resent"):  # a turn that resent its history goes on resending it
                return (yield from self._resent(plan, loaded, message, whole, system, chosen=True))
            selected = saved.get("selected")
            return dataclasses.replace(plan, kept=tuple(saved.get("kept") or ()), composes=bool(saved.get("composes")),
                                       selected=DisclosedTools.restored(catalog, selected) if catalog and selected else None)  # fmt: skip
        plan = self._decided(plan, whole) if disclosed is not None else plan
        if not (self.reads_traces(model) and state.turns <= self.config.traces.max_entries and not state.composed):
            return plan
        if (not state.turns and plan.tools is not None) or plan.prompt.tokens.state:
            # Resending sends every schema: a first turn does only where the policy found that
            # every schema pays for its first write (``prefer_whole``). And the history holds
            # no connector's current state, which the composed prompt shows. Else the turn
            # composes, and so does every later one.
            return dataclasses.replace(plan, composes=True)
        return (yield from self._resent(plan, loaded, message, whole, system))

    def reads_traces(self, model: str) -> bool:
        """Whether a turn to ``model`` may resend a young session's history
        (``caching.resend_history``, for a model whose prices the policy knows)."""
        return self.config.caching.resend_history and bool(self.tools.policy(model).rules.input_price)

    def _note_memory(self, session_id: str, prompt: Prompt) -> None:
        """Teach ``MemorySize`` the memory of ``session_id``'s composed ``prompt`` at its first
        turn past the recent window, once: a turn planned again (a retry after a failed call)
        is not noted twice, nor by two threads at once. The last ``_NOTED`` sessions noted
        are remembered (a session reset is forgotten: ``forget``)."""
        if self._noted.add(session_id, True):
            self.memory.note(prompt.tokens.memory - prompt.tokens.state)

    def forget(self, session_id: str) -> None:
        """A session reset: its next first turn past the window is noted again, and its tools
        start anew (``ToolPlanner.forget``)."""
        self._noted.forget(session_id)
        self.tools.forget(session_id)

    def _resent(
        self, plan: TurnPlan, loaded: Loaded, message: str, whole: int, system: str | None, *, chosen: bool = False
    ) -> Program[TurnPlan]:
        """The plan resending the session's history with every schema (after the client's
        own ``system`` text, if any), where that costs no more per turn than the composed
        prompt (``resends``), or where it was ``chosen`` by the turn's first request. A
        session whose history cannot be resent whole, or would not pay, composes from now on.
        While the recent window still shows every turn, the composed prompt has little
        memory yet: it is counted with the memory composed prompts took once a turn left the
        window (``MemorySize``, once learned), since the choice to compose holds for later
        turns."""
        state = loaded.state
        traces = (yield from self.ops.traces(plan.session_id, loaded)) if state.turns else []
        composed = dataclasses.replace(plan, composes=True)
        if len(traces) != state.turns or not resendable(traces):  # a turn not traced, or not whole
            return composed
        composer = self.ops.composer
        resent = resent_prompt(composer, state, traces, message, system=system)
        if chosen:
            return dataclasses.replace(plan, prompt=resent, tools=None, selected=None, kept=(), resent=True)
        history = whole + resent.tokens.total
        budget = self.ops.budget(plan.model)
        if (budget is not None and history > budget) or (not plan.every and any("tool_calls" in m for m in resent.messages)):
            return composed  # over the prompt cap; or tool calls a call without tools may not carry (Anthropic)
        count = composer.tokenizer.count_message
        last = count(resent.messages[-2]) if len(resent.messages) > 2 else 0
        history_stable = history - resent.tokens.current - resent.tokens.priming - last
        schemas = plan.schemas()
        composed_tokens = self.tools.counter.tokens(schemas) + plan.prompt.tokens.total
        memory = self.memory.mean()
        if memory is not None and state.turns <= self.config.recent.turns:  # no turn left the window: little memory yet
            composed_tokens += max(round(memory) - plan.prompt.tokens.memory, 0)
        # What the cache holds of the composed prompt: every schema and the system text the
        # resent prompts began with too (its memory sections were never sent yet), or the
        # disclosed tools that stay from call to call (what follows them changes).
        if plan.tools is None:
            composed_stable = whole + resent.tokens.system + resent.tokens.notes
        else:
            composed_stable = self.tools.counter.tokens(plan.tools.schemas()[: plan.tools.stable_tools])
        if not resends(plan.policy.rules, history=history, history_stable=history_stable, composed=composed_tokens,
                       composed_stable=composed_stable, follow=plan.loop_odds.follow()):  # fmt: skip
            return composed
        return dataclasses.replace(plan, prompt=resent, tools=None, selected=None, kept=(), resent=True)

    def _prompt(
        self, state: SessionState, message: str, model: str, extra: int, candidates: Sequence[Candidate], system: str | None
    ) -> Program[tuple[Prompt, str]]:
        """The composed prompt and its static system text: ours, or the client's ``system``."""
        composer = self.ops.composer
        if system is None:
            prompt = yield from self.ops.compose(state, message, model=model, extra_tokens=extra, candidates=candidates)
            return prompt, composer.static_prefix
        # The client's own system text takes the place of the configured static prefix.
        own = composer.tokenizer.count_chat("system", system)
        extra += max(own - composer.static_tokens, 0)
        prompt = yield from self.ops.compose(state, message, model=model, extra_tokens=extra, candidates=candidates)
        return rebased(prompt, system, static_prefix=composer.static_prefix, count=composer.tokenizer.count_chat), system

    def _room(self, model: str, message: str, system: str | None) -> int | None:
        """What the prompt cap of ``model`` leaves for tools and memory after ``message``, the
        reply's priming and the static system text (ours, or the client's ``system`` where it
        is longer: the composer counts the longer of the two); None: no cap. The memory the
        composer never cuts (notes, the current context, a connector's state) is not known
        yet, so it is not taken off."""
        budget = self.ops.budget(model)
        if budget is None:
            return None
        composer = self.ops.composer
        tokenizer = composer.tokenizer
        own = composer.static_tokens if system is None else max(tokenizer.count_chat("system", system), composer.static_tokens)
        return budget - own - tokenizer.count_chat("user", message) - REPLY_PRIMING

    def _decided(self, plan: TurnPlan, whole: int) -> TurnPlan:
        """The plan after the tool policy: the matched tools it leaves out, or every schema."""
        assert plan.tools is not None
        prompt, policy = plan.prompt, plan.policy
        system = prompt.messages[0].get("content") if prompt.messages and policy.rules.explicit else None
        stable = self.ops.composer.tokenizer.count(system[: prompt.stable_system_chars]) if isinstance(system, str) else 0
        figures = Figures(
            messages=prompt.tokens.total, stable_system=stable, turn=prompt.turn, budget=self.ops.budget(plan.model)
        )
        decision = self.tools.decide(plan.tools, figures, policy, whole, plan.session_id)
        # A copy even with nothing dropped: what the turn loads joins it, not what was matched
        # up front (``selected``), by which the process learns how often a turn needs a loader.
        disclosed = plan.tools.without(decision.drop)
        selected = plan.tools if self.config.disclosure.cache_aware else None  # kept when every schema is sent instead
        # Every schema sent: the tools matched or filled up front stay no longer (what the turn
        # calls does); they would reach the minimum next turn, and disclose it anew, rewriting
        # what this turn had the cache write.
        kept = () if decision.whole else tuple(plan.tools.kept)
        return dataclasses.replace(plan, tools=None if decision.whole else disclosed, selected=selected, kept=kept)

    def made(self, call: CallMade, *, after_results: bool, offered: bool, loaded: bool = False) -> dict[str, Any]:
        """Report one call: learn whether a call that ``offered`` tools was followed by
        another (``after_results``: it came after tool results; ``loaded``: results that only
        loaded schemas), and write its usage line."""
        if offered and call.error is None:
            self.tools.note_call(after_results, bool(call.reply.get("tool_calls")), loaded=loaded)
        return self.sink.made(call)

    def finish(self, plan: TurnPlan, turn: Turn, *, ended: bool) -> None:
        """Learn from a finished turn: which of the tools matched up front it called (only
        when it ``ended`` normally)."""
        if plan.selected is not None and ended:
            self.tools.note_matches(plan.selected, (call.name for call in turn.tool_calls), plan.tools)

    def record(
        self, plan: TurnPlan, turn: Turn, *, ended: bool, billed: Mapping[str, Any] | None,
        sent: Sequence[Mapping[str, Any]] | None = None,
    ) -> Program[int]:  # fmt: skip
        """Learn from the turn (``finish``) and record it with what its first call carried
        (``billed``) and the tools it keeps."""
        self.finish(plan, turn, ended=ended)
        return self.ops.record(plan.session_id, turn, prompt=plan.prompt, billed=billed, kept=plan.kept, sent=sent,
                               composed=plan.composes)  # fmt: skip

    def update(
        self, plan: TurnPlan, turn: Turn, *, ended: bool, billed: Mapping[str, Any] | None, turn_id: str,
        sent: Sequence[Mapping[str, Any]] | None,
    ) -> Program[tuple[TurnUpdate, tuple[bytes, ...]]]:  # fmt: skip
        """Learn from the turn and give what recording it writes, with its pieces' vectors
        (semantic recall), for an entrance that records it itself (the endpoint queues it in
        the session's arrival order)."""
        self.finish(plan, turn, ended=ended)
        self.tools.learn(turn)
        update = self.ops.update(turn, prompt=prompt_json(plan.prompt, billed, sent), kept=plan.kept, turn_id=turn_id,
                                 composed=plan.composes)  # fmt: skip
        vectors = yield from self.embedder.encoded(update)
        return update, vectors or ()
