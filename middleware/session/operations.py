"""The session operations on the store, each written once as a program: load a session and
compose its prompt, record a turn (or hold it through an outage), reset, list, inspect.

What a load leaves in this process: the owner a session was seen with (its notes are read
with its state next time), warnings for what was corrupt or evicted, and the composed
prompt until its turn is recorded (the inspector shows it as the turn's prompt).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from ..config.schema import Config
from ..connectors import Connector, connector_lines, connector_observations
from ..core.archive import Candidate, query_terms
from ..core.composer import MAX_TOOLS_RECORDED, Composer
from ..core.effects import Command, Program
from ..core.state import (
    MAX_MODEL,
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
from ..exceptions import InvalidInputError, InvalidToolCallError, StoreError
from ..lru import Lru
from ..store.decoding import Loaded
from ..store.keys import Layout
from ..store.load import load
from ..store.record import Recorded, record
from ..store.sessions import (
    Inspection,
    decode_traces,
    eviction_policy,
    inspect,
    list_sessions,
    ping,
    read_traces,
    reset,
)
from ..tokens import context_window
from .embedder import Embedder
from .held import HeldTurns

__all__ = ["SessionOperations", "prompt_json"]

_PROMPT_CHARS = 64_000


def prompt_json(prompt: Prompt, billed: Mapping[str, Any] | None = None, sent: Sequence[Mapping[str, Any]] | None = None) -> str:
    """The prompt as the inspector shows it; long messages cut in the middle past 64 kB.
    ``billed``: what the first call of the turn also carried and cost (tool schemas, cache);
    ``sent``: the messages as they went (the endpoint's, on the client's own system text)."""
    messages = list(sent) if sent is not None else prompt.messages
    record = {"messages": messages, "tokens": prompt.tokens.as_dict(), "full_history_tokens": prompt.full_history_tokens,
              "turn": prompt.turn, "trimmed": list(prompt.trimmed),
              "recalled": [item.as_dict() for item in prompt.recalled], **(billed or {})}  # fmt: skip
    text = orjson.dumps(record, default=str)
    if len(text) > _PROMPT_CHARS:
        record["messages"] = [{**m, "content": cut_middle(m["content"], 2_000)} if isinstance(m.get("content"), str) else m
                              for m in messages]  # fmt: skip
        text = orjson.dumps(record, default=str)
    return text.decode() if len(text) <= _PROMPT_CHARS else ""


class SessionOperations:
    """See the module docstring. ``learn``: what the engine learns from each recorded turn."""

    def __init__(
        self, config: Config, layout: Layout, composer: Composer, embedder: Embedder, owners: Lru[tuple[str, str]], *,
        connectors: Sequence[Connector] = (), learn: Any = None,
    ) -> None:  # fmt: skip
        self.config, self.layout, self.composer, self.embedder, self.owners = config, layout, composer, embedder, owners
        self.connectors, self.learn = tuple(connectors), learn
        self.degrade = config.store.on_store_error == "degrade"
        self.held = HeldTurns(config.store, embedder, self._write, self.shown)
        self._prompts: Lru[Prompt] = Lru(4_096)  # composed, not yet recorded
        self._budgets: dict[str | None, int | None] = {}  # by model
        self._server_checked = False

    # --- checks (no I/O) ---------------------------------------------------------------------

    def session_id(self, value: Any) -> str:
        return check_session_id(value, limit=self.config.max_session_id_chars)

    def user_message(self, value: Any) -> str:
        return check_user_message(value, limit=self.config.tokens.max_message_chars)

    @staticmethod
    def model(value: Any) -> str | None:
        """A model name given to a call (None or "": the configured one); InvalidInputError
        naming its type, or its length past MAX_MODEL (a litellm model string is short)."""
        if value is None or (isinstance(value, str) and len(value) <= MAX_MODEL):
            return value or None
        if not isinstance(value, str):
            raise InvalidInputError(
                f"model is of type {type(value).__name__[:40]}; expected a litellm model string such as 'openai/gpt-4o-mini'."
            )
        raise InvalidInputError(f"model has {len(value):,} characters; expected a litellm model string of at most {MAX_MODEL}.")

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
        except (KeyError, TypeError):  # TypeError: an unhashable model, refused below
            name = self.model(model)
            tokens = self.config.tokens
            window = context_window(name or tokens.model) if tokens.budget is None else None
            cap = tokens.budget if tokens.budget is not None else max(window - tokens.reply_reserve, 64) if window else None
            return self._budgets.setdefault(model, cap)

    def shown(self, text: str) -> str:
        """``text`` as logs may show it: itself only with usage_log.include_content."""
        return text if self.config.usage_log.include_content else f"<{len(text)} chars>"

    # --- loading and composing -------------------------------------------------------------

    def loaded(self, session_id: str, loaded: Loaded) -> SessionState:
        """What a load leaves in this process: the owner, warnings."""
        if loaded.state.owner is not None:
            self.owners.put(session_id, loaded.state.owner)
        for corrupt in loaded.corrupt:
            log.warning("store.corrupt_record", session=session_id, key=corrupt.part, reason=corrupt.reason)
        if loaded.missing:
            log.warning("store.partial_session", session=session_id, missing=list(loaded.missing), turns=loaded.state.turns,
                        hint="parts of the session were evicted: see maxmemory-policy in docs/reference/errors.md")  # fmt: skip
        return loaded.state

    def get_state(self, session_id: str) -> Program[SessionState]:
        """What the session remembers."""
        session_id = self.session_id(session_id)
        return self.loaded(session_id, (yield from load(self.layout, session_id, owner=self.owners.get(session_id))))

    def before_store(self, session_id: str, *, tolerate: bool) -> Program[None]:
        """What goes first on a call that reaches the store: the server's eviction policy,
        once per process, and the session's turns held through an outage (see HeldTurns.flush)."""
        if not self._server_checked:
            yield from self._check_server()
        if self.held:
            yield from self.held.flush(session_id, tolerate=tolerate)

    def load(self, session_id: str, message: str, *, ahead: Sequence[Command] = (), traces: bool = False) -> Program[Loaded]:
        """The session and the archive's pieces for ``message`` (none for ""), with the replies
        of the commands sent ``ahead`` of its reads and, with ``traces``, a young session's
        turn records (see ``load.load``). With
        ``on_store_error: degrade`` an unreachable store gives an empty session (a warning),
        not an error, unless commands were sent ahead: their caller needs their replies."""
        try:
            yield from self.before_store(session_id, tolerate=True)
            query = (
                query_terms(message, ()) if self.layout.recall and message else ()
            )  # the store selects by the message's own terms
            vector = (yield from self.embedder.message(message)) if message else ()
            loaded = yield from load(self.layout, session_id, owner=self.owners.get(session_id), query=query, vector=vector,
                                     ahead=ahead, traces=traces)  # fmt: skip
        except StoreError as exc:
            if not self.degrade or ahead:
                raise
            log.warning("store.degraded", session=session_id, operation="load", error=redact_secrets(str(exc)))
            return Loaded(SessionState(session_id=session_id), ())
        self.loaded(session_id, loaded)
        return loaded

    def compose(
        self, state: SessionState, message: str, *, model: str | None, extra_tokens: int, candidates: Sequence[Candidate]
    ) -> Program[Prompt]:
        """The prompt for ``message``, with the connectors' lines, within ``budget(model)``
        counting ``extra_tokens`` sent beside the messages (tool schemas)."""
        lines = (yield from connector_lines(self.connectors, state.session_id)) if self.connectors else ()
        prompt = self.composer.compose(state, message, budget=self.budget(model), extra_tokens=extra_tokens, checked=True,
                                       candidates=candidates, state_lines=lines)  # fmt: skip
        self._prompts.put(state.session_id, prompt)  # stored with the turn, for the inspector
        return prompt

    def prepare(self, session_id: str, user_message: str, *, model: str | None = None, extra_tokens: int = 0) -> Program[Prompt]:
        """Compose the prompt for ``user_message``, with its token figures, within
        ``budget(model)`` counting ``extra_tokens`` sent beside the messages (tool schemas)."""
        session_id, user_message = self.session_id(session_id), self.user_message(user_message)
        loaded = yield from self.load(session_id, user_message)
        return (
            yield from self.compose(
                loaded.state, user_message, model=model, extra_tokens=extra_tokens, candidates=loaded.candidates
            )
        )

    # --- recording ---------------------------------------------------------------------------

    def record_turn(
        self, session_id: str, *, user: str, assistant: str = "", tool_calls: Iterable[ToolCall | Mapping[str, Any]] | None = None
    ) -> Program[int]:
        """Remember a finished turn; returns the session's turn count after it (0 when held:
        see ``record``)."""
        session_id = self.session_id(session_id)
        return self.record(session_id, self.turn(user, assistant, tool_calls), prompt=self._prompts.pop(session_id))

    def update(
        self, turn: Turn, *, prompt: str, observed: Sequence[str] = (), kept: Sequence[str] = (), turn_id: str | None = None,
        composed: bool = False,
    ) -> TurnUpdate:  # fmt: skip
        """What recording ``turn`` writes (``prompt``: its JSON for the inspector; ``kept``:
        tools it keeps as if it had called them, before those it called; ``composed``: the
        session composes from now on)."""
        # 128 random bits as 32 hex digits (what uuid4().hex gives, without the UUID object).
        update = self.composer.apply_turn(turn, turn_id=turn_id or os.urandom(16).hex(), prompt=prompt, observed=observed)
        if kept:  # before the tools it called: the order they were sent in
            update = dataclasses.replace(update, tools=tuple(dict.fromkeys([*kept, *update.tools]))[:MAX_TOOLS_RECORDED])
        return dataclasses.replace(update, composed=True) if composed else update

    def record(
        self, session_id: str, turn: Turn, *, prompt: Prompt | None, billed: Mapping[str, Any] | None = None,
        kept: Sequence[str] = (), sent: Sequence[Mapping[str, Any]] | None = None, composed: bool = False,
    ) -> Program[int]:  # fmt: skip
        """Remember ``turn`` (``composed``: see ``update``); returns the session's turn count after it. With
        ``on_store_error: degrade`` an unreachable store does not raise: the turn is held,
        a warning is logged, 0 is returned, and the turn is written before anything else
        once the store answers again."""
        observed = (yield from connector_observations(self.connectors, session_id, turn)) if self.connectors else ()
        shown = prompt_json(prompt, billed, sent) if prompt else ""
        update = self.update(turn, prompt=shown, observed=observed, kept=kept, composed=composed)
        encoded: tuple[bytes, ...] | None = None
        try:
            yield from self.before_store(session_id, tolerate=False)
            encoded = yield from self.embedder.encoded(update)
            turns = (yield from self._write(session_id, update, encoded or ())).turns
        except StoreError as exc:
            if not self.degrade:
                raise  # not learned from: the caller may retry it
            self.learn(turn)  # held: it will be written
            self.held.hold(session_id, update, exc, encoded)
            return 0
        self.learn(turn)
        if debug_enabled():
            for key, value in update.context:
                log.debug("context.set", session=session_id, key=key, value=self.shown(value))
            log.debug("summary.updated", session=session_id, line=self.shown(update.summary_line))
            log.debug("turn.recorded", session=session_id, turn=turns, turn_full_tokens=update.full_tokens)
        return turns

    def _write(self, session_id: str, update: TurnUpdate, vectors: tuple[bytes, ...]) -> Program[Recorded]:
        recorded = yield from record(self.layout, session_id, update, now=time.time(), vectors=vectors)
        if recorded.repaired:
            log.warning("store.repaired", session=session_id, keys=list(recorded.repaired))
        if recorded.index_error:
            log.warning("store.index_not_updated", session=session_id, error=recorded.index_error)
        return recorded

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

    # --- the rest of a session's life ---------------------------------------------------------

    def reset(self, session_id: str) -> Program[None]:
        """Forget a session entirely."""
        session_id = self.session_id(session_id)
        yield from reset(self.layout, session_id)
        self.owners.forget(session_id)

    def list_sessions(self, *, search: str | None = None, page: int = 1, page_size: int = 20) -> Program[SessionPage]:
        """Sessions newest first, optionally those whose id contains ``search``."""
        return list_sessions(self.layout, search=search, page=page, page_size=page_size)

    def traces(self, session_id: str, loaded: Loaded | None = None) -> Program[list[dict[str, Any]]]:
        """The session's turn records, oldest first: those its load read, else read now
        (see ``read_traces``)."""
        if loaded is not None and loaded.traces is not None:
            return decode_traces(loaded.traces)
        return (yield from read_traces(self.layout, session_id))

    def inspect(self, session_id: str, *, traces: int = 100) -> Program[Inspection]:
        """Everything stored for a session: state, notes, the last ``traces`` turn records
        and the last prompt; corrupt records are listed, not raised."""
        return inspect(self.layout, self.session_id(session_id), traces=traces)

    def ping(self) -> Program[bool]:
        """Whether the store answers (StoreError when it does not)."""
        return ping(self.layout)
