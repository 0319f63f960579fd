"""Tool planning for one engine: the tools a turn is given, their disclosure catalog, the
tool policy of each model, and what the process learns of how models use tools (which
tools are called together, how often a matched tool is called, how often a call is
followed by another)."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, TypeAlias

import orjson

from .. import llm
from ..config.schema import Config
from ..core.caching import Rules
from ..core.disclosure import Catalog, CoUse, DisclosedTools, MatchOdds, auto_groups, entry_of
from ..core.disclosure.groups import description_of
from ..core.policy import Decision, Figures, GrowthPace, LoopOdds, ToolPolicy
from ..core.state import SessionState, Turn
from ..exceptions import InvalidToolCallError
from ..lru import Lru
from ..tools import Tool, Toolset, import_tool, origin_of

__all__ = ["SchemaCount", "ToolPlanner", "ToolsArg"]

# What chat(tools=...) accepts: callables, Tool objects, a Toolset; None for the skills' tools.
ToolsArg: TypeAlias = "Iterable[Tool | Callable[..., Any]] | Toolset | None"


class SchemaCount:
    """Schemas counted as litellm counts them for ``model``'s tokenizer (a ``SchemaCounter``)."""

    def __init__(self, model: str) -> None:
        self.model = model

    def tokens(self, schemas: Sequence[Mapping[str, Any]] | None) -> int:
        return llm.tools_tokens(self.model, schemas)

    def sizes(self, schemas: Sequence[Mapping[str, Any]] | None) -> list[int]:
        return llm.tool_sizes(self.model, schemas)


class _SharedCoUse(CoUse):
    """CoUse shared by an engine's threads: each call holds its lock, and only for itself
    (a selection's ranking runs outside it)."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def learn(self, names: Iterable[str]) -> None:
        called = list(names)
        with self._lock:
            super().learn(called)

    def out_of_reach(self, called: Iterable[str], unreached: Iterable[str]) -> None:
        names, out = list(called), list(unreached)
        with self._lock:
            super().out_of_reach(names, out)

    def companions(self, names: Iterable[str]) -> list[str]:
        given = list(names)
        with self._lock:
            return super().companions(given)


class ToolPlanner:
    """See the module docstring. ``rules``: the caching rules the figures use for a model;
    ``static_tokens``: the static system text's tokens."""

    def __init__(self, config: Config, rules: Callable[[str], Rules], static_tokens: int) -> None:
        self.config, self.settings = config, config.disclosure
        self.counter = SchemaCount(config.tokens.model)
        self._rules, self._static_tokens = rules, static_tokens
        self._skill_tools: list[Tool] | None = None
        self._catalogs: Lru[tuple[Catalog | None]] = Lru(256)
        self._co_use = _SharedCoUse()  # tools called together, for disclosure
        self.loop_odds = LoopOdds()  # how often a call's reply asks for tools: where breakpoints end
        self._match_odds = MatchOdds()  # how often a tool matched at each rank is called: which are sent
        self._pace = GrowthPace()  # how fast the tools that stay grow after a first turn
        self._paced: Lru[int] = Lru(10_000)  # session -> the last turn whose growth the pace noted
        self._whole_at: Lru[float] = Lru(10_000)  # session -> when its last turn sent every schema (this process)

    def skill_tools(self) -> list[Tool]:
        """The tools the configured skills bring (imported on first use)."""
        if self._skill_tools is None:
            self._skill_tools = [import_tool(ref, skill.name) for skill in self.config.skills for ref in skill.tools]
        return list(self._skill_tools)

    def toolset(self, tools: ToolsArg = None) -> Toolset:
        """``tools`` as a Toolset: None means the skills' tools, [] means none."""
        if tools is None:
            return Toolset(self.skill_tools())
        return tools if isinstance(tools, Toolset) else Toolset(tools)

    def catalog(self, toolset: Toolset) -> Catalog | None:
        """The disclosure catalog of ``toolset``, or None when every schema is sent on every
        call (disclosure off, or the schemas together under ``disclosure.min_tokens``).
        Catalogs are kept by what they hold: a client that sends the same schemas with
        every request gets the same catalog."""
        if not self.settings.enabled or not toolset:
            return None
        if self.settings.loader_name in toolset:
            raise InvalidToolCallError(
                f"A tool is named '{self.settings.loader_name}', the name of the disclosure loader; "
                "rename the tool or set disclosure.loader_name."
            )
        skills = {ref.rsplit(":", 1)[1]: skill.name for skill in self.config.skills for ref in skill.tools}
        schemas = toolset.schemas
        descriptions = [description_of(schema) for schema in schemas]
        groups = auto_groups([(tool.name, origin_of(tool.fn)) for tool in toolset], skills, descriptions)
        key = hashlib.sha1(orjson.dumps([schemas, groups], option=orjson.OPT_SORT_KEYS)).hexdigest()
        cached = self._catalogs.get(key)
        if cached is None:
            cached = (self._make_catalog(schemas, groups),)
            self._catalogs.put(key, cached)
        return cached[0]

    def _make_catalog(self, schemas: list[dict[str, Any]], groups: list[str]) -> Catalog | None:
        if self.counter.tokens(schemas) < self.settings.min_tokens:
            return None
        entries = [entry_of(schema, group) for schema, group in zip(schemas, groups, strict=True)]
        return Catalog(entries, loader_name=self.settings.loader_name)

    def policy(self, model: str) -> ToolPolicy:
        """The tool policy for calls to ``model``."""
        return ToolPolicy(self._rules(model), self.config.caching.anthropic_breakpoints, self.counter, self._static_tokens)

    def refers(self, model: str) -> bool:
        """Whether a turn to ``model`` has the loader's answers reference what they load
        (``caching.tool_references``): an Anthropic model with tool search called, its
        requests marked."""
        caching = self.config.caching
        return caching.tool_references and self.policy(model).marks and llm.expands_tool_references(model, caching.price_as)

    def select(
        self, catalog: Catalog, state: SessionState, message: str, *, policy: ToolPolicy, whole_tokens: int, exact: bool = False,
        vector: Sequence[float] = (), budget: int | None = None,
    ) -> DisclosedTools:  # fmt: skip
        """What the session's next turn sends up front from ``catalog`` (see Catalog.select),
        with the companions of its tools learned from the turns this engine recorded, and the
        message's embedding when tools are matched by meaning. With ``disclosure.cache_aware``,
        recently used tools stay only where the model's prompt caching makes them worth
        keeping (``ToolPolicy.keeps_recent``; ``whole_tokens``: every schema's), and grow, or
        are filled, into the minimum cached prefix (``grows_recent``) up to half of
        ``budget`` at most (what the prompt cap leaves after the message and system text)."""
        cached = grows = None
        if self.settings.cache_aware:

            def cached(staying: Sequence[Mapping[str, Any]]) -> bool:
                return policy.keeps_recent(staying, whole_tokens)

            def grows(staying: Sequence[Mapping[str, Any]]) -> bool:
                return policy.grows_recent(staying, whole_tokens)

        def fits(staying: Sequence[Mapping[str, Any]]) -> bool:
            return budget is None or 2 * self.counter.tokens(staying) <= budget

        return catalog.select(state.tool_uses, state.turns + 1, message, self.settings, co_use=self._co_use, exact=exact,
                              vector=vector, cached=cached, grows=grows, fits=fits)  # fmt: skip

    def decide(
        self, disclosed: DisclosedTools, figures: Figures, policy: ToolPolicy, whole_tokens: int, session_id: str = ""
    ) -> Decision:
        """What the turn's first call sends, by the policy and the odds learned so far
        (nothing changes without ``disclosure.cache_aware``). Every schema is warm for a
        session whose last turn in this process sent it within ``caching.ttl_seconds``."""
        if not self.settings.cache_aware:
            return Decision()
        at = self._whole_at.get(session_id) if session_id else None
        now = time.time()
        warm = at is not None and now - at <= self.config.caching.ttl_seconds
        decision = policy.decide(disclosed, figures, self._match_odds, whole_tokens, self.loop_odds, warm=warm,
                                 pace=self._pace.mean())  # fmt: skip
        # What joined the tools that stay: nothing where every schema goes instead (none of
        # them stays). Once a turn: a turn planned again in this process (an upstream error,
        # say) grew the list once.
        grew = disclosed.growing and figures.turn > 1 and not decision.whole
        if grew and (not session_id or self._paced.swap(session_id, figures.turn) != figures.turn):
            self._pace.note(policy.joining(disclosed))
        if session_id and decision.whole:
            self._whole_at.put(session_id, now)
        elif session_id and at is not None:  # its last turn did not send every schema: no longer warm
            self._whole_at.pop(session_id)
        return decision

    def forget(self, session_id: str) -> None:
        """A session reset in this process: what it remembers of the session's turns (their
        numbers start again, and it sent no schema yet). Another process's reset is not seen:
        there a restarted session's turn of a number already noted is not noted again, once."""
        self._paced.forget(session_id)
        self._whole_at.forget(session_id)

    def note_call(self, after_results: bool, followed: bool, *, loaded: bool = False) -> None:
        """One call that offered tools (``loaded``: after a round that only loaded schemas),
        and whether its reply asked for them."""
        self.loop_odds.note(after_results, followed, loaded=loaded)

    def note_matches(self, selected: DisclosedTools, called: Iterable[str], sent: DisclosedTools | None = None) -> None:
        """A turn that ended normally: which of the tools matched up front it called, and
        (``sent``: the tools the turn sent and loaded, None for every schema) which tools of
        its catalog were out of its reach, for the companions."""
        names = list(called)
        self._match_odds.note(selected.settled, selected.ranked, selected.companions, names)
        self._match_odds.note_miss(any(name not in selected for name in names))
        if sent is not None and names and self.settings.co_use_tools:
            self._co_use.out_of_reach(names, (name for name in sent.catalog.entries if name not in sent))

    def companions(self, catalog: Catalog, names: Sequence[str], sent: Collection[str] = ()) -> list[str]:
        """The tools of ``catalog`` usually called with ``names`` (learned from the turns
        this engine recorded), most often first, none of ``sent`` (those the turn has sent
        already): ``disclosure.co_use_tools`` of them at most (a turn's load asks with the
        tools it loaded, a searching load with its matches and the turn's own tools too)."""
        if not self.settings.co_use_tools:
            return []
        learned = self._co_use.companions(names)
        return [name for name in learned if name in catalog and name not in sent][: self.settings.co_use_tools]

    def learn(self, turn: Turn) -> None:
        """Learn which tools the turn called together, for disclosure's companions."""
        if turn.tool_calls and self.settings.enabled and self.settings.co_use_tools:
            self._co_use.learn(call.name for call in turn.tool_calls)
