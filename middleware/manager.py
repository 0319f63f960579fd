"""The session manager: the shell around the pure core (load -> build -> call -> record).

``SessionManager`` is synchronous over redis-py; ``AsyncSessionManager`` has the
same methods, awaited, over ``redis.asyncio``. Both validate input the same way
and build the same store commands.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import orjson

from .composer import apply_turn, compose, tokenizer_for
from .config import Config, load_config
from .events import debug_enabled, log
from .exceptions import ConfigError, InvalidToolCallError, StoreError
from .lru import Lru
from .notes import WRITES, apply_operation, notes_tool_schema
from .state import Prompt, SessionState, ToolCall, Turn, TurnUpdate, check_session_id, check_text_size
from .store import AsyncRedisStore, RedisStore
from .text import cut_middle, redact_secrets
from .tokens import context_window
from .tools import Tool, Toolset
from .usage import UsageLog

if TYPE_CHECKING:
    from .chat import AsyncChatStream, ChatResult, ChatStream

__all__ = ["AsyncSessionManager", "SessionManager"]


def _tool_call(value: Any) -> ToolCall:
    if isinstance(value, ToolCall):
        return value
    if isinstance(value, Mapping):
        if "function" in value:  # an OpenAI tool_calls entry
            return ToolCall.from_openai(value, result=value.get("result"), ok=value.get("ok", True))
        allowed = {"name", "arguments", "result", "ok", "id"}
        unknown = set(value) - allowed
        if unknown:
            raise InvalidToolCallError(f"Tool call has unknown fields {sorted(map(str, unknown))}; expected {sorted(allowed)}.")
        return ToolCall(**value)
    raise InvalidToolCallError(f"A tool call must be a ToolCall or a mapping, got {type(value).__name__}.")


def _import_tool(ref: str, skill: str) -> Tool:
    import importlib

    module_name, _, attribute = ref.partition(":")
    try:
        fn = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"Skill '{skill}' lists tool {ref!r}, which cannot be imported: {exc}.", key="skills") from None
    return Tool(fn)


_PROMPT_CHARS = 64_000


def _prompt_json(prompt: Prompt) -> str:
    """The prompt as the inspector shows it; long messages cut in the middle past 64 kB."""
    record = {"messages": prompt.messages, "tokens": prompt.tokens.as_dict(), "full_history_tokens": prompt.full_history_tokens,
              "turn": prompt.turn, "trimmed": list(prompt.trimmed)}  # fmt: skip
    text = orjson.dumps(record)
    if len(text) > _PROMPT_CHARS:
        record["messages"] = [{**m, "content": cut_middle(m["content"], 2_000)} for m in prompt.messages]
        text = orjson.dumps(record)
    return text.decode()


class _NotesEdit:
    """One notes operation as the store's optimistic transaction runs it: called with the
    current notes (perhaps more than once, if another writer got there first)."""

    def __init__(self, operation: str, content: str | None, section_header: str | None, max_chars: int) -> None:
        self.operation, self.content, self.section_header, self.max_chars = operation, content, section_header, max_chars
        self.writes = operation in WRITES
        self.message = ""

    def read(self, notes: str) -> str:
        return apply_operation(notes, self.operation, content=self.content, section_header=self.section_header)[1]

    def __call__(self, current: str) -> str:
        updated, self.message = apply_operation(
            current, self.operation, content=self.content, section_header=self.section_header, max_chars=self.max_chars
        )
        return updated


class _ManagerBase:
    is_async = False

    def __init__(self, config: Config | None = None, *, redis_url: str | None = None) -> None:
        config = config if config is not None else load_config()
        if redis_url is not None:
            config = config.with_overrides(store={"url": redis_url})
        self.config = config
        self.tokenizer = tokenizer_for(config)
        self.usage_log = UsageLog(config.usage_log.path, include_content=config.usage_log.include_content)
        self._skill_tools: list[Tool] | None = None
        # Turns the store could not take (on_store_error: degrade), oldest first; written
        # before anything else on the next store call that works.
        self._pending: deque[tuple[str, TurnUpdate]] = deque()
        self._pending_lock = threading.Lock()
        # The last prompt composed per session, stored with the turn for the inspector.
        self._prompts: Lru[Prompt] = Lru(4_096)  # composed, not yet recorded

    @property
    def pending_turns(self) -> list[tuple[str, TurnUpdate]]:
        """Turns recorded while the store was unreachable, not yet written (degrade mode)."""
        with self._pending_lock:
            return list(self._pending)

    @property
    def _degrade(self) -> bool:
        return self.config.store.on_store_error == "degrade"

    def budget(self, model: str | None = None) -> int | None:
        """The prompt cap: tokens.budget, else the model's context window minus reply_reserve."""
        if self.config.tokens.budget is not None:
            return self.config.tokens.budget
        window = context_window(model or self.config.tokens.model)
        return max(window - self.config.tokens.reply_reserve, 64) if window else None

    def _degraded_state(self, session_id: str, exc: StoreError) -> SessionState:
        log.warning("store.degraded", session=session_id, operation="load", error=redact_secrets(str(exc)))
        return SessionState(session_id=session_id)

    def _hold(self, session_id: str, update: TurnUpdate, exc: StoreError) -> int:
        with self._pending_lock:
            if len(self._pending) >= self.config.store.max_pending_turns:
                dropped, _ = self._pending.popleft()
                log.error("store.pending_overflow", session=dropped, limit=self.config.store.max_pending_turns)
            self._pending.append((session_id, update))
            waiting = len(self._pending)
        log.warning(
            "store.turn_not_recorded", session=session_id, pending=waiting, line=self._content(update.summary_line),
            error=redact_secrets(str(exc)),
        )
        return 0

    def _next_pending(self) -> tuple[str, TurnUpdate] | None:
        if not self._pending:  # the usual case, checked without the lock (deque truth is atomic)
            return None
        with self._pending_lock:
            return self._pending[0] if self._pending else None

    def _done_pending(self, item: tuple[str, TurnUpdate], turns: int) -> None:
        with self._pending_lock:
            if self._pending and self._pending[0] is item:
                self._pending.popleft()
        if turns:
            log.info("store.pending_recorded", session=item[0], turn=turns)
        else:
            log.info("store.pending_already_recorded", session=item[0])

    def skill_tools(self) -> list[Tool]:
        """The tools the configured skills bring (imported on first use)."""
        if self._skill_tools is None:
            self._skill_tools = [_import_tool(ref, skill.name) for skill in self.config.skills for ref in skill.tools]
        return list(self._skill_tools)

    def toolset(self, tools: Any = None) -> Toolset:
        """``tools`` as a Toolset: None means the skills' tools, [] means none."""
        if tools is None:
            return Toolset(self.skill_tools())
        return tools if isinstance(tools, Toolset) else Toolset(tools)

    def _session_id(self, session_id: Any) -> str:
        return check_session_id(session_id, limit=self.config.max_session_id_chars)

    def _turn(self, user: Any, assistant: Any, tool_calls: Iterable[Any] | None) -> Turn:
        limit = self.config.tokens.max_message_chars
        if tool_calls is not None and (isinstance(tool_calls, (str, bytes, Mapping)) or not isinstance(tool_calls, Iterable)):
            raise InvalidToolCallError(f"tool_calls must be a list of tool calls, got {type(tool_calls).__name__}.")
        # Turn checks types and emptiness and cleans the text; only the size limit is
        # checked here. An oversized reply is cut in the middle when recorded, not refused.
        return Turn(
            user=check_text_size(user, what="The user message", limit=limit),
            assistant=assistant,
            tool_calls=tuple(_tool_call(call) for call in tool_calls or ()),
        )

    def _update(self, session_id: str, turn: Turn) -> TurnUpdate:
        prompt = self._prompts.pop(session_id)
        # 128 random bits as 32 hex digits (what uuid4().hex gives, without the UUID object).
        turn_id = os.urandom(16).hex()
        return apply_turn(
            turn, self.config, tokenizer=self.tokenizer, turn_id=turn_id, prompt=_prompt_json(prompt) if prompt else ""
        )

    def _remember_prompt(self, session_id: str, prompt: Prompt) -> None:
        """Keep what the model is about to be sent until the turn is recorded (serialized
        then, off the build path)."""
        self._prompts.put(session_id, prompt)

    def _party(self, user_id: Any, agent: Any) -> tuple[str, str]:
        limit = 128
        return (
            check_session_id(user_id, limit=limit, what="User id"),
            check_session_id(agent, limit=limit, what="Agent name"),
        )

    def notes_tool(self, user_id: str, agent: str) -> Tool:
        """The ``manage_long_term_memory`` tool for this (user, agent), for chat(tools=[...])."""
        user_id, agent = self._party(user_id, agent)
        manage = self.manage_notes

        def manage_long_term_memory(operation: str = "read", content: str | None = None, section_header: str | None = None) -> Any:
            return manage(user_id, agent, operation, content=content, section_header=section_header)

        return Tool(manage_long_term_memory, schema=notes_tool_schema())

    def _compose(self, state: SessionState, user_message: Any, model: str | None, extra_tokens: int) -> Prompt:
        return compose(
            state, user_message, self.config, tokenizer=self.tokenizer, budget=self.budget(model), extra_tokens=extra_tokens
        )

    def _content(self, text: str) -> str:
        return text if self.config.usage_log.include_content else f"<{len(text)} chars>"

    def _log_recorded(self, session_id: str, update: TurnUpdate, turns: int) -> None:
        if not debug_enabled():
            return
        for key, value in update.context:
            log.debug("context.set", session=session_id, key=key, value=self._content(value))
        log.debug("summary.updated", session=session_id, line=self._content(update.summary_line))
        log.debug("turn.recorded", session=session_id, turn=turns, turn_full_tokens=update.full_tokens)


    async def achat(
        self,
        session_id: str,
        user_message: str,
        *,
        model: str | None = None,
        tools: Any = None,
        stream: bool = False,
        **litellm_kwargs: Any,
    ) -> ChatResult | AsyncChatStream:
        """One full turn over ``litellm.acompletion`` (the async twin of ``SessionManager.chat``).

        With ``stream=True`` returns an async iterator of text chunks that records the turn
        when it ends; its ``.result`` then holds the ChatResult."""
        from .chat import AsyncChatStream, arun_chat

        if stream:
            return AsyncChatStream(self, session_id, user_message, model, tools, litellm_kwargs)
        return await arun_chat(self, session_id, user_message, model=model, tools=tools, kwargs=litellm_kwargs)

    def wrap(self, fn: Any) -> Any:
        """Wrap a chatbot ``fn(messages) -> reply`` as ``(session_id, user_message) -> reply``;
        the wrapper is async when ``fn`` or this manager is."""
        from .chat import wrap

        return wrap(self, fn)


class SessionManager(_ManagerBase):
    """Remembers sessions and composes token-efficient prompts for them.

    >>> mgr = SessionManager.from_config()          # embedded default, memory:// store
    >>> messages = mgr.build_messages("s1", "goto shop")
    """

    def __init__(
        self,
        config: Config | None = None,
        *,
        redis_url: str | None = None,
        client: Any = None,
        store: RedisStore | None = None,
    ) -> None:
        super().__init__(config, redis_url=redis_url)
        if store is not None:
            self.store = store
        elif client is not None:
            self.store = RedisStore(client, self.config)
        else:
            self.store = RedisStore.from_url(self.config.store.url, self.config)

    @classmethod
    def from_config(cls, path: str | os.PathLike[str] | None = None, **kwargs: Any) -> SessionManager:
        """Load ``path`` (or ``$MIDDLEWARE_CONFIG``, or the embedded default) and connect."""
        return cls(config=load_config(path), **kwargs)

    def _flush_pending(self) -> None:
        while (item := self._next_pending()) is not None:
            # A held turn may have reached Redis before the failure (the reply was lost).
            turns = 0 if self.store.has_turn(*item) else self.store.record(*item)
            self._done_pending(item, turns)

    def _load_for_prompt(self, session_id: str) -> SessionState:
        try:
            self._flush_pending()
            return self.store.load(session_id)
        except StoreError as exc:
            if not self._degrade:
                raise
            return self._degraded_state(session_id, exc)

    def prepare(self, session_id: str, user_message: str, *, model: str | None = None, extra_tokens: int = 0) -> Prompt:
        """Compose the prompt for ``user_message``, with its token figures.

        The prompt stays within :meth:`budget` for ``model`` (default: tokens.model),
        counting ``extra_tokens`` sent beside the messages (tool schemas).
        """
        session_id = self._session_id(session_id)
        prompt = self._compose(self._load_for_prompt(session_id), user_message, model, extra_tokens)
        self._remember_prompt(session_id, prompt)
        return prompt

    def build_messages(self, session_id: str, user_message: str) -> list[dict[str, str]]:
        """OpenAI-format messages for ``user_message``, ready for any chat API."""
        return self.prepare(session_id, user_message).messages

    def record_turn(
        self,
        session_id: str,
        *,
        user: str,
        assistant: str = "",
        tool_calls: Iterable[ToolCall | Mapping[str, Any]] | None = None,
    ) -> int:
        """Remember a finished turn; returns the session's turn count after it.

        With ``on_store_error: degrade`` an unreachable store does not raise: the turn
        is kept in :attr:`pending_turns`, a warning is logged, 0 is returned, and the
        turn is written before anything else once the store answers again.
        """
        session_id = self._session_id(session_id)
        update = self._update(session_id, self._turn(user, assistant, tool_calls))
        try:
            self._flush_pending()
            turns = self.store.record(session_id, update)
        except StoreError as exc:
            if not self._degrade:
                raise
            return self._hold(session_id, update, exc)
        self._log_recorded(session_id, update, turns)
        return turns

    def get_state(self, session_id: str) -> SessionState:
        return self.store.load(self._session_id(session_id))

    def reset(self, session_id: str) -> None:
        """Forget a session entirely."""
        self.store.reset(self._session_id(session_id))

    def resolve_session(self, user_id: str, agent: str) -> str:
        """The active session of (user, agent), created if there is none."""
        return self.store.resolve_session(*self._party(user_id, agent))

    def new_session(self, user_id: str, agent: str) -> str:
        """Start a fresh session for (user, agent) and make it the active one."""
        return self.store.resolve_session(*self._party(user_id, agent), new=True)

    def notes(self, user_id: str, agent: str) -> str:
        """The long-term notes of (user, agent) (Markdown; "" when there are none)."""
        return self.store.get_notes(*self._party(user_id, agent))

    def manage_notes(
        self, user_id: str, agent: str, operation: str = "read", *, content: str | None = None, section_header: str | None = None
    ) -> str:
        """Read or edit the notes (see middleware.notes for the operations); returns what to
        tell the caller. Raises NotesError for a bad operation."""
        user_id, agent = self._party(user_id, agent)
        edit = _NotesEdit(operation, content, section_header, self.config.notes.max_chars)
        if not edit.writes:
            return edit.read(self.store.get_notes(user_id, agent))
        self.store.update_notes(user_id, agent, edit)
        return edit.message

    def chat(
        self,
        session_id: str,
        user_message: str,
        *,
        model: str | None = None,
        tools: Any = None,
        stream: bool = False,
        **litellm_kwargs: Any,
    ) -> ChatResult | ChatStream:
        """One full turn through litellm: compose, call, run tools, record, log.

        ``tools``: Python callables (schemas from signatures and docstrings), ``Tool``
        objects with explicit schemas, or None for the skills' tools. With
        ``stream=True`` returns an iterator of text chunks that records the turn
        when it ends; its ``.result`` then holds the ChatResult.
        """
        from .chat import ChatStream, run_chat

        if stream:
            return ChatStream(self, session_id, user_message, model, tools, litellm_kwargs)
        return run_chat(self, session_id, user_message, model=model, tools=tools, kwargs=litellm_kwargs)

    def close(self) -> None:
        self.store.close()
        self.usage_log.close()

    def __enter__(self) -> SessionManager:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SessionManager(store={self.store!r}, assistant={self.config.assistant.name!r})"


class AsyncSessionManager(_ManagerBase):
    """The asyncio twin of :class:`SessionManager`: the same methods, awaited."""

    is_async = True

    def __init__(
        self,
        config: Config | None = None,
        *,
        redis_url: str | None = None,
        client: Any = None,
        store: AsyncRedisStore | None = None,
    ) -> None:
        super().__init__(config, redis_url=redis_url)
        if store is not None:
            self.store = store
        elif client is not None:
            self.store = AsyncRedisStore(client, self.config)
        else:
            self.store = AsyncRedisStore.from_url(self.config.store.url, self.config)

    @classmethod
    def from_config(cls, path: str | os.PathLike[str] | None = None, **kwargs: Any) -> AsyncSessionManager:
        return cls(config=load_config(path), **kwargs)

    async def _flush_pending(self) -> None:
        while (item := self._next_pending()) is not None:
            turns = 0 if await self.store.has_turn(*item) else await self.store.record(*item)
            self._done_pending(item, turns)

    async def _load_for_prompt(self, session_id: str) -> SessionState:
        try:
            await self._flush_pending()
            return await self.store.load(session_id)
        except StoreError as exc:
            if not self._degrade:
                raise
            return self._degraded_state(session_id, exc)

    async def prepare(self, session_id: str, user_message: str, *, model: str | None = None, extra_tokens: int = 0) -> Prompt:
        session_id = self._session_id(session_id)
        prompt = self._compose(await self._load_for_prompt(session_id), user_message, model, extra_tokens)
        self._remember_prompt(session_id, prompt)
        return prompt

    async def build_messages(self, session_id: str, user_message: str) -> list[dict[str, str]]:
        return (await self.prepare(session_id, user_message)).messages

    async def record_turn(
        self,
        session_id: str,
        *,
        user: str,
        assistant: str = "",
        tool_calls: Iterable[ToolCall | Mapping[str, Any]] | None = None,
    ) -> int:
        session_id = self._session_id(session_id)
        update = self._update(session_id, self._turn(user, assistant, tool_calls))
        try:
            await self._flush_pending()
            turns = await self.store.record(session_id, update)
        except StoreError as exc:
            if not self._degrade:
                raise
            return self._hold(session_id, update, exc)
        self._log_recorded(session_id, update, turns)
        return turns

    async def get_state(self, session_id: str) -> SessionState:
        return await self.store.load(self._session_id(session_id))

    async def reset(self, session_id: str) -> None:
        await self.store.reset(self._session_id(session_id))

    async def resolve_session(self, user_id: str, agent: str) -> str:
        return await self.store.resolve_session(*self._party(user_id, agent))

    async def new_session(self, user_id: str, agent: str) -> str:
        return await self.store.resolve_session(*self._party(user_id, agent), new=True)

    async def notes(self, user_id: str, agent: str) -> str:
        return await self.store.get_notes(*self._party(user_id, agent))

    async def manage_notes(
        self, user_id: str, agent: str, operation: str = "read", *, content: str | None = None, section_header: str | None = None
    ) -> str:
        user_id, agent = self._party(user_id, agent)
        edit = _NotesEdit(operation, content, section_header, self.config.notes.max_chars)
        if not edit.writes:
            return edit.read(await self.store.get_notes(user_id, agent))
        await self.store.update_notes(user_id, agent, edit)
        return edit.message

    # The same turn as SessionManager.achat, awaited: chat and achat are one method here.
    chat = _ManagerBase.achat
    achat = _ManagerBase.achat

    async def close(self) -> None:
        await self.store.close()
        self.usage_log.close()

    async def __aenter__(self) -> AsyncSessionManager:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncSessionManager(store={self.store!r}, assistant={self.config.assistant.name!r})"
