"""The session operations, each written once as a program that both managers run.

An ``Engine`` holds one config, its composer, the usage log and what this process
remembers between calls: turns held while the store was down (``on_store_error:
degrade``), the context members it last saw per session, the owners of sessions, and
each session's last composed prompt until its turn is recorded. Its methods check
their input and return programs (see ``middleware.core.effects``); the managers run
them in the calling thread or awaited.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
import time
import uuid
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeAlias, cast

import orjson

from .. import llm
from ..config.schema import Config
from ..connectors import Connector, connector_lines, connector_observations
from ..core.archive import query_terms
from ..core.caching import LoopOdds, Rules
from ..core.composer import MAX_TOOLS_RECORDED, Composer
from ..core.disclosure import Catalog, CoUse, DisclosedTools, MatchOdds, auto_groups, entry_of
from ..core.effects import Inline, Io, Program
from ..core.notes import WRITES, apply_operation, notes_tool_schema
from ..core.state import (
    Prompt,
    SessionPage,
    SessionState,
    ToolCall,
    Turn,
    TurnUpdate,
    check_session_id,
    check_text_size,
    check_user_message,
)
from ..core.text import cut_middle, redact_secrets
from ..events import debug_enabled, log
from ..exceptions import InvalidToolCallError, LLMError, StoreError, StoreUnavailableError
from ..lru import Lru
from ..store.decoding import Loaded
from ..store.keys import Layout
from ..store.load import load
from ..store.notes import edit_notes, read_notes
from ..store.record import Recorded, record
from ..store.sessions import Inspection, eviction_policy, inspect, list_sessions, pair_sessions, ping, reset, resolve_session
from ..store.vectors import encode_vector, vector_index
from ..tokens import context_window, get_tokenizer
from ..tools import Tool, Toolset, import_tool, origin_of
from ..usage.log import UsageLog
from ..usage.pricing import Billing

__all__ = ["Engine", "ToolsArg"]

# What chat(tools=...) accepts: callables, Tool objects, a Toolset; None for the skills' tools.
ToolsArg: TypeAlias = "Iterable[Tool | Callable[..., Any]] | Toolset | None"

_PROMPT_CHARS = 64_000
# Texts embedded per call (pieces of held turns when they are written, tools matched by
# meaning): providers cap a call's inputs (Cohere at 96 texts, Vertex AI at 250).
EMBED_BATCH = 96
_PARTY_CHARS = 128


def _prompt_json(prompt: Prompt, billed: Mapping[str, Any] | None = None) -> str:
    """The prompt as the inspector shows it; long messages cut in the middle past 64 kB.
    ``billed``: what the first call of the turn also carried and cost (tool schemas, cache)."""
    record = {"messages": prompt.messages, "tokens": prompt.tokens.as_dict(), "full_history_tokens": prompt.full_history_tokens,
              "turn": prompt.turn, "trimmed": list(prompt.trimmed),
              "recalled": [item.as_dict() for item in prompt.recalled], **(billed or {})}  # fmt: skip
    text = orjson.dumps(record)
    if len(text) > _PROMPT_CHARS:
        record["messages"] = [{**m, "content": cut_middle(m["content"], 2_000)} for m in prompt.messages]
        text = orjson.dumps(record)
    return text.decode()


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

    def companions(self, names: Iterable[str]) -> list[str]:
        given = list(names)
        with self._lock:
            return super().companions(given)


def _size(update: TurnUpdate) -> int:
    """About how many bytes a held turn keeps in memory (its text, prompt and trace)."""
    text = len(update.summary_line) + len(update.prompt) + sum(len(m.content) for m in update.recent)
    return 256 + text + sum(len(k) + len(v) for k, v in update.context) + len(orjson.dumps(update.traces))


class Engine:
    """What a session manager does, as programs; see the module docstring."""

    def __init__(self, config: Config, connectors: Iterable[Connector] = ()) -> None:
        self.config = config
        self.connectors = tuple(connectors)
        self.layout = Layout.of(config)
        self.tokenizer = get_tokenizer(config.tokens.model, encoding=config.tokens.encoding)
        self.composer = Composer(config, self.tokenizer)
        self.usage_log = UsageLog(config.usage_log.path, include_content=config.usage_log.include_content)
        self.degrade = config.store.on_store_error == "degrade"
        # Turns the store could not take, oldest first: (session, update, bytes held, its
        # pieces' vectors if they were made before the store failed, else None: made when it
        # is written). Each is written before anything else on its own session's next call
        # that reaches the store.
        self._pending: deque[tuple[str, TurnUpdate, int, tuple[bytes, ...] | None]] = deque()
        self._pending_bytes = 0
        self._pending_lock = threading.Lock()
        self._prompts: Lru[Prompt] = Lru(4_096)  # composed, not yet recorded
        self._server_checked = False
        # Semantic recall: None until the store says whether it has vector search.
        self._semantic: bool | None = None if config.memory.recall == "semantic" and self.layout.recall else False
        self._message_vectors: Lru[list[float]] = Lru(64)  # by model and message: made for tools, kept for recall
        self._tool_vectors: Lru[array[float]] = Lru(2_048)  # by model and tool text: see _embed_tools
        self._owners: Lru[tuple[str, str]] = Lru()
        self._skill_tools: list[Tool] | None = None
        self._budgets: dict[str | None, int | None] = {}  # by model
        self.billing = Billing(config, self.tokenizer)
        self._billed: Lru[dict[str, Any]] = Lru(4_096)  # a turn's first-call figures, until it is recorded
        self._kept_tools: Lru[tuple[str, ...]] = Lru(4_096)  # tools a turn keeps uncalled, until it is recorded
        self._catalogs: Lru[tuple[Toolset, Catalog | None]] = Lru(256)
        self._co_use = _SharedCoUse()  # tools called together, for disclosure
        self.loop_odds = LoopOdds()  # how often a call's reply asks for tools: where breakpoints end
        self.match_odds = MatchOdds()  # how often a tool matched at each rank is called: which are sent

    # --- checks and helpers (no I/O) -----------------------------------------------

    def session_id(self, value: Any) -> str:
        return check_session_id(value, limit=self.config.max_session_id_chars)

    def party(self, user_id: Any, agent: Any) -> tuple[str, str]:
        user_id = check_session_id(user_id, limit=_PARTY_CHARS, what="User id")
        return user_id, check_session_id(agent, limit=_PARTY_CHARS, what="Agent name")

    def user_message(self, value: Any) -> str:
        return check_user_message(value, limit=self.config.tokens.max_message_chars)

    def turn(self, user: Any, assistant: Any, tool_calls: Iterable[Any] | None) -> Turn:
        if tool_calls is not None and (isinstance(tool_calls, (str, bytes, Mapping)) or not isinstance(tool_calls, Iterable)):
            raise InvalidToolCallError(f"tool_calls must be a list of tool calls, got {type(tool_calls).__name__}.")
        # Turn checks types and emptiness and cleans the text; only the size limit is
        # checked here. An oversized reply is cut in the middle when recorded, not refused.
        return Turn(
            user=check_text_size(user, what="The user message", limit=self.config.tokens.max_message_chars),
            assistant=assistant,
            tool_calls=tuple(ToolCall.coerce(call) for call in tool_calls or ()),
        )

    def budget(self, model: str | None = None) -> int | None:
        """The prompt cap: tokens.budget, else the model's context window minus reply_reserve."""
        try:
            return self._budgets[model]
        except KeyError:
            tokens = self.config.tokens
            window = context_window(model or tokens.model) if tokens.budget is None else None
            cap = tokens.budget if tokens.budget is not None else max(window - tokens.reply_reserve, 64) if window else None
            return self._budgets.setdefault(model, cap)

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
        call (disclosure off, or the schemas together under ``disclosure.min_tokens``)."""
        settings = self.config.disclosure
        if not settings.enabled or not toolset:
            return None
        if settings.loader_name in toolset:
            raise InvalidToolCallError(
                f"A tool is named '{settings.loader_name}', the name of the disclosure loader; "
                "rename the tool or set disclosure.loader_name."
            )
        key = "\x00".join(f"{tool.name}:{id(tool)}" for tool in toolset)
        cached = self._catalogs.get(key)
        if cached is not None and list(cached[0]) == list(toolset):
            return cached[1]
        catalog = self._make_catalog(toolset)
        self._catalogs.put(key, (toolset, catalog))
        return catalog

    def disclose(
        self,
        catalog: Catalog,
        state: SessionState,
        message: str,
        *,
        exact: bool = False,
        vector: Sequence[float] = (),
        model: str | None = None,
        whole_tokens: int = 0,
    ) -> DisclosedTools:
        """What the session's next turn sends up front from ``catalog`` (see Catalog.select),
        with the companions of its tools learned from the turns this engine recorded, and the
        message's embedding (``meaning``) when tools are matched by meaning. Given the
        ``model`` (with ``disclosure.cache_aware``), recently used tools stay only where that
        model's prompt caching makes them worth keeping (``keeps_recent``; ``whole_tokens``:
        every schema's)."""
        cached = grows = None
        if model and self.config.disclosure.cache_aware:
            cached = functools.partial(self.keeps_recent, model, whole_tokens=whole_tokens)
            grows = functools.partial(self.grows_recent, model, whole_tokens=whole_tokens)
        return catalog.select(state.tool_uses, state.turns + 1, message, self.config.disclosure, co_use=self._co_use,
                              exact=exact, vector=vector, cached=cached, grows=grows)  # fmt: skip

    def keeps_recent(self, model: str, schemas: Sequence[Mapping[str, Any]], *, whole_tokens: int = 0) -> bool:
        """Whether recently used tools stay in every call to ``model``, by the caching rules
        the figures use (``caching``), given the schemas that would stay (``schemas``: the
        loader, pinned and recent tools) and every schema's tokens (``whole_tokens``). They
        are kept so that the prompt's opening is read from the provider's cache:

        - a model whose caching the figures do not model (``caching.rules`` none): they stay
          where litellm prices its cached reads below its input (DeepSeek, say), else not;
        - Claude without ``caching.anthropic_breakpoints``: nothing is cached, they do not stay;
        - they stay once they (with the loader and the pinned tools) reach the model's minimum
          cached prefix (the matched tools after them change from turn to turn, so what
          follows is not counted);
        - below it, where a cached token costs a quarter of an input token or less (or the
          prices are unknown), they stay whenever every schema could be cached: the list grows
          into the minimum, and ``cache_aware`` may send every schema instead. Where it costs
          more (gpt-4o-mini: half), they do not: they would be paid in full on every call."""
        rules = self.billing.rules(model)
        read, price = rules.read_price, rules.input_price
        if rules.kind == "none":
            return read is not None and price is not None and read < price
        if not self.caches(rules):
            return False
        if llm.tools_tokens(self.config.tokens.model, schemas) >= rules.min_tokens:
            return True
        return self._pays_below_minimum(rules, whole_tokens)

    def grows_recent(self, model: str, schemas: Sequence[Mapping[str, Any]], *, whole_tokens: int = 0) -> bool:
        """Whether the tools that stay (``schemas``, as for ``keeps_recent``) are kept though
        they are still short of the model's minimum cached prefix (a cached token costing a
        quarter or less): then the tools a turn sends up front stay too, so the list reaches
        the minimum after a few turns and is read from the cache from then on, instead of
        being written anew, or every schema sent, until enough tools have been used."""
        rules = self.billing.rules(model)
        if not self.caches(rules):  # also false for caching.rules none
            return False
        below = llm.tools_tokens(self.config.tokens.model, schemas) < rules.min_tokens
        return below and self._pays_below_minimum(rules, whole_tokens)

    def _pays_below_minimum(self, rules: Rules, whole_tokens: int) -> bool:
        """Kept tools short of the minimum pay where a cached token costs a quarter or less
        (or the prices are unknown) and every schema could be cached (see ``keeps_recent``)."""
        read, price = rules.read_price, rules.input_price
        deep = read is None or price is None or read * 4 <= price
        return deep and whole_tokens + self.composer.static_tokens >= rules.min_tokens

    def caches(self, rules: Rules) -> bool:
        """Whether calls under ``rules`` are read from a provider's cache at all, as the
        figures model it: a provider whose caching they model, and for Anthropic only with
        ``caching.anthropic_breakpoints`` (it caches nothing unmarked)."""
        return rules.kind != "none" and (not rules.explicit or self.config.caching.anthropic_breakpoints)

    def meaning(self, catalog: Catalog | None, message: str) -> Program[Sequence[float]]:
        """The message's embedding for matching ``catalog``'s tools by meaning
        (``disclosure.embedding_model``), the tools' own made with it first when the catalog
        has none; () when not asked for, or when the model fails (a warning: the turn
        matches by words)."""
        model = self.config.disclosure.embedding_model
        if catalog is None or not model or self.config.disclosure.match_tools <= 0:
            return ()
        try:
            if catalog.vectors is None:
                yield from self._embed_tools(catalog, model)
            (vector,) = yield from self._embedded(model, [message])
            if catalog.vectors is not None and len(catalog.vectors[0][0]) != len(vector):
                # The model now answers in another size: its tools are embedded again next turn.
                size = len(catalog.vectors[0][0])
                catalog.vectors = None
                for text in catalog.meaning_texts():
                    self._tool_vectors.forget(f"{model}\x00{text}")
                raise LLMError(f"a message vector of size {len(vector)} against tool vectors of size {size}; expected one size")
        except LLMError as exc:
            log.warning("disclosure.embedding_failed", model=model, error=redact_secrets(str(exc))[:200],
                        hint="tools are matched by words this turn")  # fmt: skip
            return ()
        if self._semantic is not False and self.config.memory.embedding_model == model:
            self._message_vectors.put(f"{model}\x00{message}", vector)  # recall asks for it next
        return vector

    def _embed_tools(self, catalog: Catalog, model: str) -> Program[None]:
        """Give ``catalog`` its tools' vectors, embedding in batches of EMBED_BATCH those not
        kept from an earlier catalog; each batch is kept as it is made, so a turn after a
        failed one embeds only what is still missing. LLMError when a batch fails."""
        tools = catalog.meaning_texts()
        found = {text: self._tool_vectors.get(f"{model}\x00{text}") for text in tools}
        missing = [text for text, vector in found.items() if vector is None]
        for start in range(0, len(missing), EMBED_BATCH):
            batch = missing[start : start + EMBED_BATCH]
            made = yield from self._embedded(model, batch)
            for text, vector in zip(batch, made, strict=True):
                found[text] = kept = array("d", vector)  # 8 bytes a number, against about 32 in a list
                self._tool_vectors.put(f"{model}\x00{text}", kept)
        sizes = sorted({len(vector or ()) for vector in found.values()})
        if len(sizes) > 1:  # kept from before the model changed, or a model that answers unevenly
            for text in found:
                self._tool_vectors.forget(f"{model}\x00{text}")
            raise LLMError(f"vectors of sizes {sizes[:5]}; expected one size")
        catalog.set_vectors([cast("array[float]", found[text]) for text in tools])

    def _embedded(self, model: str, texts: list[str]) -> Program[list[list[float]]]:
        """Embeddings of ``texts`` by ``model``, one non-empty vector per text (else LLMError);
        a message whose vector ``meaning`` has just made (for tool matching, then asked for by
        recall) is not embedded again."""
        if len(texts) == 1:
            made = self._message_vectors.get(f"{model}\x00{texts[0]}")
            if made is not None:
                return [made]
        vectors: list[list[float]] = yield Io(lambda: llm.embed(model, texts), lambda: llm.aembed(model, texts))
        if len(vectors) != len(texts) or not all(vectors):
            raise LLMError(f"{len(vectors)} vectors for {len(texts)} texts")
        return vectors

    def _make_catalog(self, toolset: Toolset) -> Catalog | None:
        settings = self.config.disclosure
        schemas = toolset.schemas
        if llm.tools_tokens(self.config.tokens.model, schemas) < settings.min_tokens:
            return None
        skills = {ref.rsplit(":", 1)[1]: skill.name for skill in self.config.skills for ref in skill.tools}
        groups = auto_groups([(tool.name, origin_of(tool.fn)) for tool in toolset], skills)
        return Catalog([entry_of(schema, group) for schema, group in zip(schemas, groups, strict=True)],
                       loader_name=settings.loader_name)  # fmt: skip

    def note_kept_tools(self, session_id: str, names: Sequence[str]) -> None:
        """Tools the session's next recorded turn keeps as if it had called them (see
        ``grows_recent``), in the order they were sent."""
        self._kept_tools.put(session_id, tuple(names))

    def note_billed(self, session_id: str, billed: dict[str, Any]) -> None:
        """Keep what a turn's first call carried and cost beside its prompt, for the inspector."""
        self._billed.put(session_id, billed)

    def notes_tool(self, user_id: str, agent: str) -> Tool:
        """The ``manage_long_term_memory`` tool for this (user, agent), for chat(tools=[...])."""
        user_id, agent = self.party(user_id, agent)
        manage = self.manage_notes

        def manage_long_term_memory(
            operation: str = "read", content: str | None = None, section_header: str | None = None
        ) -> Inline:
            return Inline(manage(user_id, agent, operation, content=content, section_header=section_header))

        return Tool(manage_long_term_memory, schema=notes_tool_schema())

    @property
    def pending_turns(self) -> list[tuple[str, TurnUpdate]]:
        with self._pending_lock:
            return [(session_id, update) for session_id, update, _, _ in self._pending]

    def content(self, text: str) -> str:
        """``text`` as logs may show it: itself only with usage_log.include_content."""
        return text if self.config.usage_log.include_content else f"<{len(text)} chars>"

    # --- loading and composing --------------------------------------------------------

    def _loaded(self, session_id: str, loaded: Loaded) -> SessionState:
        """What a load leaves in this process: the owner, warnings."""
        if loaded.state.owner is not None:
            self._owners.put(session_id, loaded.state.owner)
        for corrupt in loaded.corrupt:
            log.warning("store.corrupt_record", session=session_id, key=corrupt.part, reason=corrupt.reason)
        if loaded.missing:
            log.warning("store.partial_session", session=session_id, missing=list(loaded.missing), turns=loaded.state.turns,
                        hint="parts of the session were evicted: see maxmemory-policy in the README")  # fmt: skip
        return loaded.state

    def get_state(self, session_id: str) -> Program[SessionState]:
        """What the session remembers."""
        session_id = self.session_id(session_id)
        return self._loaded(session_id, (yield from load(self.layout, session_id, owner=self._owners.get(session_id))))

    def prepare(
        self,
        session_id: str,
        user_message: str,
        *,
        model: str | None = None,
        extra_tokens: int = 0,
        schemas_for: Callable[[SessionState], int] | None = None,
    ) -> Program[Prompt]:
        """Compose the prompt for ``user_message``, with its token figures.

        The prompt stays within ``budget(model)`` (default model: tokens.model), counting
        ``extra_tokens`` sent beside the messages (tool schemas). ``schemas_for``, given the
        loaded state, chooses the tool schemas to send and returns their tokens instead."""
        session_id, user_message = self.session_id(session_id), self.user_message(user_message)
        try:
            if not self._server_checked:
                yield from self._check_server()
            if self._pending:
                yield from self._flush(session_id, tolerate=True)
            query = query_terms(user_message, ()) if self.layout.recall else ()  # the store selects by the message's own terms
            found = (yield from self._vectors([user_message])) if self._semantic is not False else ()
            vector = found[0] if found else ()
            loaded = yield from load(self.layout, session_id, owner=self._owners.get(session_id), query=query, vector=vector)
            state, candidates = self._loaded(session_id, loaded), loaded.candidates
        except StoreError as exc:
            if not self.degrade:
                raise
            log.warning("store.degraded", session=session_id, operation="load", error=redact_secrets(str(exc)))
            state, candidates = SessionState(session_id=session_id), ()
        if schemas_for is not None:
            extra_tokens = schemas_for(state)
        lines = (yield from connector_lines(self.connectors, session_id)) if self.connectors else ()
        prompt = self.composer.compose(state, user_message, budget=self.budget(model), extra_tokens=extra_tokens, checked=True,
                                       candidates=candidates, state_lines=lines)  # fmt: skip
        self._prompts.put(session_id, prompt)  # stored with the turn, for the inspector
        return prompt

    # --- recording ----------------------------------------------------------------------

    def record_turn(
        self, session_id: str, *, user: str, assistant: str = "", tool_calls: Iterable[ToolCall | Mapping[str, Any]] | None = None
    ) -> Program[int]:
        """Remember a finished turn; returns the session's turn count after it.

        With ``on_store_error: degrade`` an unreachable store does not raise: the turn is
        kept in ``pending_turns``, a warning is logged, 0 is returned, and the turn is
        written before anything else once the store answers again."""
        session_id = self.session_id(session_id)
        prompt, billed, kept = self._prompts.pop(session_id), self._billed.pop(session_id), self._kept_tools.pop(session_id)
        turn = self.turn(user, assistant, tool_calls)
        observed = (yield from connector_observations(self.connectors, session_id, turn)) if self.connectors else ()
        update = self.composer.apply_turn(
            turn,
            # 128 random bits as 32 hex digits (what uuid4().hex gives, without the UUID object).
            turn_id=os.urandom(16).hex(),
            prompt=_prompt_json(prompt, billed) if prompt else "",
            observed=observed,
        )
        if kept:  # before the tools it called: the order they were sent in
            update = dataclasses.replace(update, tools=tuple(dict.fromkeys([*kept, *update.tools]))[:MAX_TOOLS_RECORDED])
        encoded: tuple[bytes, ...] | None = None
        try:
            if not self._server_checked:
                yield from self._check_server()
            if self._pending:
                yield from self._flush(session_id)
            encoded = yield from self._encoded(update)
            recorded = yield from record(self.layout, session_id, update, now=time.time(), vectors=encoded or ())
            turns = self._recorded(session_id, recorded)
        except StoreError as exc:
            if not self.degrade:
                raise  # not learned from: the caller may retry it
            self._learn(turn)  # held: it will be written
            return self._hold(session_id, update, exc, encoded)
        self._learn(turn)
        if debug_enabled():
            for key, value in update.context:
                log.debug("context.set", session=session_id, key=key, value=self.content(value))
            log.debug("summary.updated", session=session_id, line=self.content(update.summary_line))
            log.debug("turn.recorded", session=session_id, turn=turns, turn_full_tokens=update.full_tokens)
        return turns

    def _learn(self, turn: Turn) -> None:
        """Learn which tools the turn called together, for disclosure's companions."""
        settings = self.config.disclosure
        if turn.tool_calls and settings.enabled and settings.co_use_tools:
            self._co_use.learn(call.name for call in turn.tool_calls)

    def _encoded(self, update: TurnUpdate) -> Program[tuple[bytes, ...] | None]:
        """The vectors of a turn's archived pieces, encoded for the store (semantic recall):
        () when it has none to make, None when the embedding model failed (a held turn tries
        again when it is written)."""
        if self._semantic is False or not update.pieces:
            return ()
        vectors = yield from self._vectors([p.text for p in update.pieces])
        if vectors:
            return tuple(encode_vector(v) for v in vectors)
        # _vectors may have learned that the store has no vector search: none to make; else the model failed
        return () if cast("bool | None", self._semantic) is False else None

    def _vectors(self, texts: list[str]) -> Program[list[list[float]] | tuple[()]]:
        """Embeddings of ``texts`` for semantic recall, or () (none asked for, the model
        failed: a warning, and the turn goes on with lexical recall)."""
        if not texts:
            return ()
        model = self.config.memory.embedding_model or ""
        try:
            vectors = yield from self._embedded(model, texts)
        except LLMError as exc:
            log.warning("recall.embedding_failed", model=model, error=redact_secrets(str(exc))[:200])
            return ()
        if self._semantic is None:  # first use: make the store's vector index, or learn it has none
            self._semantic = yield from vector_index(self.layout, len(vectors[0]))
            if not self._semantic:
                log.warning("recall.semantic_unavailable", hint="the store has no vector search (Redis 8, or Redis "
                            "Stack, outside a cluster): recall ranks lexically")  # fmt: skip
                return ()
        return vectors

    def _check_server(self) -> Program[None]:
        """Once per process: warn when the server may evict our keys (its maxmemory-policy)."""
        policy = yield from eviction_policy(self.layout)
        self._server_checked = True
        if policy is None or policy == "noeviction":
            return
        if policy.startswith("allkeys"):
            log.warning("store.eviction_possible", policy=policy,
                        hint="Redis may evict parts of sessions, notes and the listing index: use noeviction or volatile-*")  # fmt: skip
        elif self.layout.ttl_ms:
            log.info("store.eviction_possible", policy=policy, hint="Redis may evict sessions before their TTL; notes are kept")

    def _recorded(self, session_id: str, recorded: Recorded) -> int:
        if recorded.repaired:
            log.warning("store.repaired", session=session_id, keys=list(recorded.repaired))
        if recorded.index_error:
            log.warning("store.index_not_updated", session=session_id, error=recorded.index_error)
        return recorded.turns

    def _hold(self, session_id: str, update: TurnUpdate, exc: StoreError, vectors: tuple[bytes, ...] | None) -> int:
        """Keep a turn the store did not take. Past max_pending_bytes, held vectors go first
        (they are made again when the turn is written), then the oldest turns."""
        size = _size(update) + sum(map(len, vectors or ()))
        limits = self.config.store
        with self._pending_lock:
            if vectors and self._pending_bytes + size > limits.max_pending_bytes:
                size, vectors = size - sum(map(len, vectors)), None
            for index, (sid, held, held_size, held_vectors) in enumerate(self._pending):
                if self._pending_bytes + size <= limits.max_pending_bytes:
                    break
                if held_vectors:
                    freed = sum(map(len, held_vectors))
                    self._pending[index] = (sid, held, held_size - freed, None)
                    self._pending_bytes -= freed
            while self._pending and (
                len(self._pending) >= limits.max_pending_turns or self._pending_bytes + size > limits.max_pending_bytes
            ):
                dropped, _, dropped_size, _ = self._pending.popleft()
                self._pending_bytes -= dropped_size
                log.error(
                    "store.pending_overflow", session=dropped, turns=limits.max_pending_turns, bytes=limits.max_pending_bytes
                )
            self._pending.append((session_id, update, size, vectors))
            self._pending_bytes += size
            waiting = len(self._pending)
        log.warning("store.turn_not_recorded", session=session_id, pending=waiting, line=self.content(update.summary_line),
                    error=redact_secrets(str(exc)))  # fmt: skip
        return 0

    def _flush(self, session_id: str | None, *, tolerate: bool = False) -> Program[int]:
        """Write the held turns of ``session_id`` (None: of every session) first, in order;
        one that did reach Redis is not written twice. Returns how many were written.

        A session's held turns never hold up another session. With ``tolerate``, a store
        that refuses them (a write refused for memory, say) is a warning and the caller
        goes on; an unreachable one is still an error."""
        with self._pending_lock:
            held = [item for item in self._pending if session_id is None or item[0] == session_id]
        written, failed, embedding = 0, set(), True
        made: dict[int, tuple[bytes, ...]] = {}  # vectors made for held turns, by id of their update
        for index, (sid, update, _, vectors) in enumerate(held):
            if sid in failed:
                continue  # keep this session's order: nothing after a turn that failed
            try:
                # A turn held before its vectors were made gets them now, so semantic recall
                # finds it too: with the held turns after it, a few calls rather than one per
                # turn, and kept with them in case the write fails.
                if vectors is None and update.pieces and id(update) not in made and embedding:
                    made.update((yield from self._held_vectors([u for _, u, _, v in held[index:] if v is None and u.pieces])))
                    embedding = id(update) in made  # a call that failed is not tried again in this flush
                encoded = vectors if vectors is not None else made.get(id(update), ())
                recorded = yield from record(self.layout, sid, update, now=time.time(), vectors=encoded)
            except StoreError as exc:
                if session_id is not None and (not tolerate or isinstance(exc, StoreUnavailableError)):
                    raise
                failed.add(sid)
                log.warning("store.pending_not_recorded", session=sid, error=redact_secrets(str(exc)))
                continue
            self._recorded(sid, recorded)
            with self._pending_lock:  # by its update: its vectors may have been let go meanwhile
                entry = next((entry for entry in self._pending if entry[1] is update), None)
                if entry is not None:
                    self._pending.remove(entry)
                    self._pending_bytes -= entry[2]
            written += 1
            log.info("store.pending_recorded" if recorded.written else "store.pending_already_recorded", session=sid,
                     turn=recorded.turns)  # fmt: skip
        return written

    def _held_vectors(self, updates: list[TurnUpdate]) -> Program[dict[int, tuple[bytes, ...]]]:
        """The vectors of the pieces of the first held turns of ``updates`` (by ``id`` of their
        update), in one embedding call of up to EMBED_BATCH pieces; {} when it fails. They are
        kept with the held turns too, within max_pending_bytes, so a write that fails does not
        have them made again."""
        batch: list[TurnUpdate] = []
        for update in updates:
            if batch and sum(len(u.pieces) for u in batch) + len(update.pieces) > EMBED_BATCH:
                break
            batch.append(update)
        if not batch or self._semantic is False:
            return {}
        vectors = yield from self._vectors([piece.text for update in batch for piece in update.pieces])
        if not vectors:
            return {}
        made, at = {}, 0
        for update in batch:
            made[id(update)] = tuple(encode_vector(v) for v in vectors[at : at + len(update.pieces)])
            at += len(update.pieces)
        with self._pending_lock:
            for index, (sid, held, size, kept) in enumerate(self._pending):
                encoded = made.get(id(held))
                if kept is None and encoded:
                    extra = sum(map(len, encoded))
                    if self._pending_bytes + extra > self.config.store.max_pending_bytes:
                        break
                    self._pending[index] = (sid, held, size + extra, encoded)
                    self._pending_bytes += extra
        return made

    def flush_pending(self) -> Program[int]:
        """Write every turn held through an outage (degrade mode), each session in order;
        returns how many were written. A session whose turns the store still refuses keeps them."""
        return self._flush(None)

    # --- sessions, users and notes -----------------------------------------------------

    def reset(self, session_id: str) -> Program[None]:
        """Forget a session entirely."""
        session_id = self.session_id(session_id)
        yield from reset(self.layout, session_id)
        self._owners.forget(session_id)
        self.billing.forget(session_id)

    def _resolve(self, user_id: str, agent: str, *, new: bool) -> Program[str]:
        user_id, agent = self.party(user_id, agent)
        candidate = f"{user_id}/{agent}/{uuid.uuid4().hex[:12]}"  # readable, searchable, unique
        session_id = yield from resolve_session(self.layout, user_id, agent, candidate=candidate, now=time.time(), new=new)
        if session_id == candidate:
            self._owners.put(candidate, (user_id, agent))
        return session_id

    def resolve_session(self, user_id: str, agent: str) -> Program[str]:
        """The active session of (user, agent), created if there is none."""
        return self._resolve(user_id, agent, new=False)

    def new_session(self, user_id: str, agent: str) -> Program[str]:
        """Start a fresh session for (user, agent) and make it the active one."""
        return self._resolve(user_id, agent, new=True)

    def pair_sessions(self, user_id: str, agent: str) -> Program[list[tuple[str, float]]]:
        """The sessions of (user, agent), newest first, with their creation times."""
        return pair_sessions(self.layout, *self.party(user_id, agent))

    def notes(self, user_id: str, agent: str) -> Program[str]:
        """The long-term notes of (user, agent) (Markdown; "" when there are none)."""
        return read_notes(self.layout, *self.party(user_id, agent))

    def manage_notes(
        self, user_id: str, agent: str, operation: str = "read", *, content: str | None = None, section_header: str | None = None
    ) -> Program[str]:
        """Read or edit the notes (operations: read, overwrite, append, prepend,
        replace_section_by_header, delete_section_by_header, delete_all_notes); returns
        what to tell the caller. Raises NotesError for a bad operation."""
        user_id, agent = self.party(user_id, agent)
        said: list[str] = []

        def edit(current: str) -> str:  # called again if another writer got there first
            updated, message = apply_operation(current, operation, content=content, section_header=section_header,
                                               max_chars=self.config.notes.max_chars)  # fmt: skip
            said.append(message)
            return updated

        if operation not in WRITES:
            edit((yield from read_notes(self.layout, user_id, agent)))
        else:
            yield from edit_notes(self.layout, user_id, agent, edit, edit_id=os.urandom(12).hex())
        return said[-1]

    # --- listing and inspection ------------------------------------------------------------

    def list_sessions(self, *, search: str | None = None, page: int = 1, page_size: int = 20) -> Program[SessionPage]:
        """Sessions newest first, optionally those whose id contains ``search``."""
        return list_sessions(self.layout, search=search, page=page, page_size=page_size)

    def inspect(self, session_id: str, *, traces: int = 100) -> Program[Inspection]:
        """Everything stored for a session: state, notes, the last ``traces`` turn records
        and the last prompt; corrupt records are listed, not raised."""
        return inspect(self.layout, self.session_id(session_id), traces=traces)

    def ping(self) -> Program[bool]:
        """Whether the store answers (StoreError when it does not)."""
        return ping(self.layout)

    def close(self) -> None:
        self.usage_log.close()
