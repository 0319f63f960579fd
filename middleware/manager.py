"""The session manager: the shell around the pure core (load -> build -> call -> record).

``SessionManager`` is synchronous over redis-py; ``AsyncSessionManager`` has the
same methods, awaited, over ``redis.asyncio``. Both validate input the same way
and build the same store commands.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from .composer import apply_turn, compose, tokenizer_for
from .config import Config, load_config
from .events import log
from .exceptions import InvalidToolCallError
from .state import Prompt, SessionState, ToolCall, Turn, TurnUpdate, check_record_text, check_session_id
from .store import AsyncRedisStore, RedisStore

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


class _ManagerBase:
    def __init__(self, config: Config | None = None, *, redis_url: str | None = None) -> None:
        config = config if config is not None else load_config()
        if redis_url is not None:
            config = config.with_overrides(store={"url": redis_url})
        self.config = config
        self.tokenizer = tokenizer_for(config)

    def _session_id(self, session_id: Any) -> str:
        return check_session_id(session_id, limit=self.config.max_session_id_chars)

    def _turn(self, user: Any, assistant: Any, tool_calls: Iterable[Any] | None) -> Turn:
        limit = self.config.tokens.max_message_chars
        if tool_calls is not None and (isinstance(tool_calls, (str, bytes, Mapping)) or not isinstance(tool_calls, Iterable)):
            raise InvalidToolCallError(f"tool_calls must be a list of tool calls, got {type(tool_calls).__name__}.")
        return Turn(
            user=check_record_text(user, what="The user message", limit=limit),
            # An oversized reply is cut in the middle when recorded, not refused.
            assistant=check_record_text(assistant, what="The assistant reply", limit=None),
            tool_calls=tuple(_tool_call(call) for call in tool_calls or ()),
        )

    def _update(self, turn: Turn) -> TurnUpdate:
        return apply_turn(turn, self.config, tokenizer=self.tokenizer)

    def _compose(self, state: SessionState, user_message: Any) -> Prompt:
        return compose(state, user_message, self.config, tokenizer=self.tokenizer)

    def _content(self, text: str) -> str:
        return text if self.config.usage_log.include_content else f"<{len(text)} chars>"

    def _log_recorded(self, session_id: str, update: TurnUpdate, turns: int) -> None:
        for key, value in update.context:
            log.debug("context.set", session=session_id, key=key, value=self._content(value))
        log.debug("summary.updated", session=session_id, line=self._content(update.summary_line))
        log.debug("turn.recorded", session=session_id, turn=turns, full_tokens=update.full_tokens)


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

    def prepare(self, session_id: str, user_message: str) -> Prompt:
        """Compose the prompt for ``user_message``, with its token figures."""
        session_id = self._session_id(session_id)
        return self._compose(self.store.load(session_id), user_message)

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
        """Remember a finished turn; returns the session's turn count after it."""
        session_id = self._session_id(session_id)
        update = self._update(self._turn(user, assistant, tool_calls))
        turns = self.store.record(session_id, update)
        self._log_recorded(session_id, update, turns)
        return turns

    def get_state(self, session_id: str) -> SessionState:
        return self.store.load(self._session_id(session_id))

    def reset(self, session_id: str) -> None:
        """Forget a session entirely."""
        self.store.reset(self._session_id(session_id))

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> SessionManager:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SessionManager(store={self.store!r}, assistant={self.config.assistant.name!r})"


class AsyncSessionManager(_ManagerBase):
    """The asyncio twin of :class:`SessionManager`: the same methods, awaited."""

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

    async def prepare(self, session_id: str, user_message: str) -> Prompt:
        session_id = self._session_id(session_id)
        return self._compose(await self.store.load(session_id), user_message)

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
        update = self._update(self._turn(user, assistant, tool_calls))
        turns = await self.store.record(session_id, update)
        self._log_recorded(session_id, update, turns)
        return turns

    async def get_state(self, session_id: str) -> SessionState:
        return await self.store.load(self._session_id(session_id))

    async def reset(self, session_id: str) -> None:
        await self.store.reset(self._session_id(session_id))

    async def close(self) -> None:
        await self.store.close()

    async def __aenter__(self) -> AsyncSessionManager:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncSessionManager(store={self.store!r}, assistant={self.config.assistant.name!r})"
