"""LangChain adapters (``pip install "token-middleware[langchain]"``).

``MemoryMiddleware`` is a LangChain v1 agent middleware for ``create_agent``: before every
model call it replaces the message list with the session's memory composed for the current
user message (what recall finds for it included), that message and the turn's tool loop;
after the agent finishes it records the turn.
``MiddlewareChatMessageHistory`` is a ``BaseChatMessageHistory`` for older chains
(``RunnableWithMessageHistory``): its ``messages`` are the composed memory.

    from langchain.agents import create_agent
    from middleware import SessionManager
    from middleware.adapters.langchain import MemoryMiddleware

    agent = create_agent(model, tools, middleware=[MemoryMiddleware(SessionManager())])
    agent.invoke({"messages": [("user", "goto shop")]}, {"configurable": {"thread_id": "user-42"}})
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ..core.conversation import or_no_text
from ..core.replies import interpret_reply
from ..core.state import Prompt
from ..exceptions import ConfigError, require
from ..session.manager import AsyncSessionManager, SessionManager
from ..session.standalone import composer_for
from .memory import memory_messages, prompt_memory, turns_in, unrecordable

__all__ = ["MemoryMiddleware", "MiddlewareChatMessageHistory"]

require("langchain.agents", "langchain", "langchain")
from langchain.agents.middleware import AgentMiddleware  # noqa: E402
from langchain_core.chat_history import BaseChatMessageHistory  # noqa: E402
from langchain_core.messages import BaseMessage, HumanMessage, RemoveMessage, convert_to_messages, convert_to_openai_messages  # noqa: E402
from langgraph.graph.message import REMOVE_ALL_MESSAGES  # noqa: E402

Manager = SessionManager | AsyncSessionManager


def _last_human(messages: Sequence[BaseMessage]) -> int | None:
    return next((i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], HumanMessage)), None)


def _as_chat(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    return list(convert_to_openai_messages(list(messages)))


class MemoryMiddleware(AgentMiddleware):
    """Gives a ``create_agent`` agent the middleware's memory of a session.

    The session is ``session_id`` when given, else the run's context (a ``session_id`` key or
    attribute), else the config's ``configurable.session_id`` or ``thread_id``. A sync agent
    (``invoke``) needs a ``SessionManager``; an async one (``ainvoke``) takes either."""

    def __init__(self, manager: Manager, *, session_id: str | None = None) -> None:
        super().__init__()
        self.manager, self.session_id = manager, session_id

    # --- what both faces do, once -----------------------------------------------------------

    def session_of(self, runtime: Any) -> str:
        """The session of this run; ConfigError naming the places looked at when there is none."""
        if self.session_id is not None:
            return self.session_id
        context = getattr(runtime, "context", None)
        found = context.get("session_id") if isinstance(context, dict) else getattr(context, "session_id", None)
        if found is None:
            from langgraph.config import get_config

            configurable = get_config().get("configurable") or {}
            found = configurable.get("session_id") or configurable.get("thread_id")
        if found is not None and not isinstance(found, str):
            raise ConfigError(f"MemoryMiddleware found a session id of type {type(found).__name__[:40]}; expected a string "
                              "(session_id=, a context's session_id, or the config's thread_id).")  # fmt: skip
        if found is None:
            raise ConfigError("MemoryMiddleware needs a session: pass session_id=, a context with session_id, or a thread_id.")
        return found

    def composed(self, messages: Sequence[BaseMessage], prompt: Prompt) -> dict[str, Any]:
        """The update that puts memory, the current message and its tool loop in place of the messages."""
        last = _last_human(messages)
        assert last is not None
        static = composer_for(self.manager.config, self.manager.tokenizer).static_prefix
        memory = convert_to_messages(prompt_memory(prompt, static))
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *memory, *messages[last:]]}

    @staticmethod
    def current(messages: Sequence[BaseMessage]) -> str | None:
        """The text of the turn's user message (the last human one), or None when there is none."""
        last = _last_human(messages)
        return None if last is None else or_no_text(messages[last].text)

    def turn(self, messages: Sequence[BaseMessage]) -> dict[str, Any] | None:
        """What to record for the run's turn: the current message, the final reply, the tool calls."""
        last = _last_human(messages)
        if last is None:
            return None
        chat = _as_chat(messages[last:])
        text, calls, _, _ = interpret_reply(chat[1:])
        user = chat[0]["content"] if isinstance(chat[0]["content"], str) else str(messages[last].text)
        return {"user": or_no_text(user), "assistant": text, "tool_calls": calls}

    def _sync(self) -> SessionManager:
        if not isinstance(self.manager, SessionManager):
            raise ConfigError("This agent runs synchronously (invoke): give MemoryMiddleware a SessionManager.")
        return self.manager

    async def _prepare(self, session_id: str, text: str) -> Prompt:
        if isinstance(self.manager, AsyncSessionManager):
            return await self.manager.prepare(session_id, text)
        return await asyncio.to_thread(self.manager.prepare, session_id, text)

    async def _record(self, session_id: str, turn: dict[str, Any]) -> None:
        if isinstance(self.manager, AsyncSessionManager):
            await self.manager.record_turn(session_id, **turn)
        else:
            await asyncio.to_thread(lambda: self.manager.record_turn(session_id, **turn))

    # --- the hooks ----------------------------------------------------------------------------

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        text = self.current(state["messages"])
        if text is None:
            return None
        return self.composed(state["messages"], self._sync().prepare(self.session_of(runtime), text))

    async def abefore_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        text = self.current(state["messages"])
        if text is None:
            return None
        return self.composed(state["messages"], await self._prepare(self.session_of(runtime), text))

    def after_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        turn = self.turn(state["messages"])
        if turn is not None:
            self._sync().record_turn(self.session_of(runtime), **turn)
        return None

    async def aafter_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        turn = self.turn(state["messages"])
        if turn is not None:
            await self._record(self.session_of(runtime), turn)
        return None


class MiddlewareChatMessageHistory(BaseChatMessageHistory):
    """A chat history whose ``messages`` are the composed memory of ``session_id``: what
    ``RunnableWithMessageHistory`` puts before each new message. Added messages are recorded
    turn by turn (a human message, then the AI's final reply, tool calls between)."""

    def __init__(self, session_id: str, manager: SessionManager) -> None:
        self.session_id, self.manager = session_id, manager
        self._pending: list[BaseMessage] = []  # the turn in progress

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        state = self.manager.get_state(self.session_id)
        return [*convert_to_messages(memory_messages(state, self.manager.config, self.manager.tokenizer)), *self._pending]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Record every turn the messages make whole. A turn that can never be recorded (a
        message past the limits, say) is dropped and its error raised, so it does not block
        later turns; one whose store write failed stays pending for the next call."""
        _as_chat(messages)  # refuses messages that are not valid before any is kept
        self._pending += list(messages)
        done = 0
        try:
            for turn, used in turns_in(_as_chat(self._pending)):
                try:
                    self.manager.record_turn(
                        self.session_id, user=turn.user, assistant=turn.assistant, tool_calls=turn.tool_calls
                    )
                except Exception as exc:
                    if unrecordable(exc):
                        done = used
                    raise
                done = used
        finally:
            del self._pending[:done]

    def clear(self) -> None:
        self._pending.clear()
        self.manager.reset(self.session_id)
