"""The engine: one config's session operations, each written once as a program that both
managers, the endpoint and the adapters run.

``Engine`` is a façade over narrow collaborators, each in its own module: the session
operations on the store (``operations``, with the turns held through an outage in
``held``), embeddings (``embedder``), tool planning (``tools``), users, agents and notes
(``accounts``), turn planning (``middleware.turn.planner``) and the usage sink
(``middleware.usage.sink``). Callers use its methods only; its methods check their input
and return programs (see ``middleware.core.effects``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..config.schema import Config
from ..connectors import Connector
from ..core.composer import Composer
from ..core.effects import Command, Program
from ..core.state import Prompt, SessionPage, SessionState, ToolCall, Turn, TurnUpdate
from ..lru import Lru
from ..store.decoding import Loaded
from ..store.keys import Layout
from ..store.sessions import Inspection
from ..tokens import Tokenizer, get_tokenizer
from ..tools import Tool, Toolset
from ..turn.plan import TurnPlan
from ..turn.planner import TurnPlanner
from ..usage.sink import CallMade, UsageSink
from .accounts import Accounts
from .embedder import Embedder
from .operations import SessionOperations
from .tools import ToolPlanner, ToolsArg

__all__ = ["Engine", "ToolsArg"]


class Engine:
    """What a session manager does, as programs; see the module docstring."""

    def __init__(
        self, config: Config, connectors: Iterable[Connector] = (), *, sink_of: Engine | None = None, tenant: str | None = None
    ) -> None:
        """``sink_of``: an engine whose usage log this one shares, as the engines of an
        endpoint's tenants do (``tenant``: whose sessions this engine's are, named in its usage
        lines); each keeps its own store layout, tools, caches and modelled provider caches."""
        self._config = config
        self._tokenizer = get_tokenizer(config.tokens.model, encoding=config.tokens.encoding)
        composer = Composer(config, self._tokenizer)
        layout = Layout.of(config)
        owners: Lru[tuple[str, str]] = Lru()
        self._embedder = Embedder(config, layout)
        self._sink: UsageSink = (
            sink_of._sink.for_tenant(config, tenant) if sink_of is not None else UsageSink(config, self._tokenizer)
        )
        self._tools = ToolPlanner(config, self._sink.billing.rules, composer.static_tokens)
        self._ops = SessionOperations(config, layout, composer, self._embedder, owners, connectors=tuple(connectors),
                                      learn=self._tools.learn)  # fmt: skip
        self._accounts = Accounts(config, layout, owners)
        self._planner = TurnPlanner(config, self._ops, self._tools, self._embedder, self._sink)

    @property
    def tokenizer(self) -> Tokenizer:
        """The tokenizer every figure is counted with (``tokens.model``)."""
        return self._tokenizer

    def checked(self, session_id: Any, message: Any = None) -> tuple[str, str]:
        """The session id and the user message (when given; else "") checked against their limits."""
        return self._ops.session_id(session_id), "" if message is None else self._ops.user_message(message)

    def budget(self, model: str | None = None) -> int | None:
        """The prompt cap: tokens.budget, else the model's context window minus reply_reserve."""
        return self._ops.budget(model)

    def toolset(self, tools: ToolsArg = None) -> Toolset:
        """``tools`` as a Toolset: None means the configured skills' tools, [] means none."""
        return self._tools.toolset(tools)

    # --- sessions ---------------------------------------------------------------------------

    def get_state(self, session_id: str) -> Program[SessionState]:
        """What the session remembers."""
        return self._ops.get_state(session_id)

    def prepare(self, session_id: str, user_message: str, *, model: str | None = None, extra_tokens: int = 0) -> Program[Prompt]:
        """Compose the prompt for ``user_message``, with its token figures, within
        ``budget(model)`` (default model: tokens.model) counting ``extra_tokens`` sent beside
        the messages (tool schemas)."""
        return self._ops.prepare(session_id, user_message, model=model, extra_tokens=extra_tokens)

    def record_turn(
        self, session_id: str, *, user: str, assistant: str = "", tool_calls: Iterable[ToolCall | Mapping[str, Any]] | None = None
    ) -> Program[int]:
        """Remember a finished turn; returns the session's turn count after it.

        With ``on_store_error: degrade`` an unreachable store does not raise: the turn is
        kept in ``pending_turns``, a warning is logged, 0 is returned, and the turn is
        written before anything else once the store answers again."""
        return self._ops.record_turn(session_id, user=user, assistant=assistant, tool_calls=tool_calls)

    def reset(self, session_id: str) -> Program[None]:
        """Forget a session entirely."""
        session_id, _ = self.checked(session_id)
        yield from self._ops.reset(session_id)
        self._sink.forget(session_id)
        self._planner.forget(session_id)

    def list_sessions(self, *, search: str | None = None, page: int = 1, page_size: int = 20) -> Program[SessionPage]:
        """Sessions newest first, optionally those whose id contains ``search``."""
        return self._ops.list_sessions(search=search, page=page, page_size=page_size)

    def inspect(self, session_id: str, *, traces: int = 100) -> Program[Inspection]:
        """Everything stored for a session: state, notes, the last ``traces`` turn records
        and the last prompt; corrupt records are listed, not raised."""
        return self._ops.inspect(session_id, traces=traces)

    def ping(self) -> Program[bool]:
        """Whether the store answers (StoreError when it does not)."""
        return self._ops.ping()

    def flush_pending(self) -> Program[int]:
        """Write every turn held through an outage (degrade mode), each session in order;
        returns how many were written. A session whose turns the store still refuses keeps them."""
        return self._ops.held.flush(None)

    @property
    def pending_turns(self) -> list[tuple[str, TurnUpdate]]:
        """Turns recorded while the store was unreachable, not yet written (degrade mode)."""
        return self._ops.held.turns

    # --- users, agents and notes ------------------------------------------------------------

    def session_of(self, user_id: str, agent: str, *, new: bool = False) -> Program[str]:
        """The active session of (user, agent), created if there is none; with ``new``, a
        fresh session that becomes the active one."""
        return self._accounts.session(user_id, agent, new=new)

    def pair_sessions(self, user_id: str, agent: str) -> Program[list[tuple[str, float]]]:
        """The sessions of (user, agent), newest first, with their creation times."""
        return self._accounts.sessions(user_id, agent)

    def notes(self, user_id: str, agent: str) -> Program[str]:
        """The long-term notes of (user, agent) (Markdown; "" when there are none)."""
        return self._accounts.notes(user_id, agent)

    def manage_notes(
        self, user_id: str, agent: str, operation: str = "read", *, content: str | None = None, section_header: str | None = None
    ) -> Program[str]:
        """Read or edit the notes (operations: read, overwrite, append, prepend,
        replace_section_by_header, delete_section_by_header, delete_all_notes); returns
        what to tell the caller. Raises NotesError for a bad operation."""
        return self._accounts.manage_notes(user_id, agent, operation, content=content, section_header=section_header)

    def notes_tool(self, user_id: str, agent: str) -> Tool:
        """The ``manage_long_term_memory`` tool for this (user, agent), for chat(tools=[...])."""
        return self._accounts.notes_tool(user_id, agent)

    # --- turns: planned once, driven by every entrance ---------------------------------------

    def load_turn(
        self, session_id: str, message: str, *, model: str | None = None, ahead: Sequence[Command] = ()
    ) -> Program[Loaded]:
        """The session and the archive's pieces for ``message``, with the replies of commands
        sent ahead in the same round trip (the endpoint's arrival), and the turn records a
        turn to ``model`` (None: the configured one) may resend of a young session."""
        traces = self._planner.reads_traces(self._ops.model(model) or self._config.model)
        return self._ops.load(session_id, message, ahead=ahead, traces=traces)

    def plan_turn(
        self, session_id: str, message: str, *, model: str | None, toolset: Toolset, exact: bool = False, disclose: bool = True,
        loaded: Loaded | None = None, system: str | None = None, saved: Mapping[str, Any] | None = None, refer: bool = True,
    ) -> Program[TurnPlan]:  # fmt: skip
        """The plan of a turn (see ``TurnPlanner.plan``); ``model`` None: the configured one."""
        return self._planner.plan(session_id, message, model=self._ops.model(model) or self._config.model, toolset=toolset, exact=exact,
                                  disclose=disclose, loaded=loaded, system=system, saved=saved, refer=refer)  # fmt: skip

    def call_made(self, call: CallMade, *, after_results: bool, offered: bool, loaded: bool = False) -> dict[str, Any]:
        """Report one call of a turn (see ``TurnPlanner.made``); its usage line."""
        return self._planner.made(call, after_results=after_results, offered=offered, loaded=loaded)

    def record_planned(
        self, plan: TurnPlan, turn: Turn, *, ended: bool, billed: Mapping[str, Any] | None,
        sent: Sequence[Mapping[str, Any]] | None = None,
    ) -> Program[int]:  # fmt: skip
        """Learn from a planned turn and record it; the session's turn count after it."""
        return self._planner.record(plan, turn, ended=ended, billed=billed, sent=sent)

    def planned_update(
        self, plan: TurnPlan, turn: Turn, *, ended: bool, billed: Mapping[str, Any] | None, turn_id: str,
        sent: Sequence[Mapping[str, Any]] | None,
    ) -> Program[tuple[TurnUpdate, tuple[bytes, ...]]]:  # fmt: skip
        """Learn from a planned turn and give what recording it writes, with its pieces'
        vectors, for an entrance that records it in its own order (the endpoint)."""
        return self._planner.update(plan, turn, ended=ended, billed=billed, turn_id=turn_id, sent=sent)

    def close(self) -> None:
        self._sink.close()
