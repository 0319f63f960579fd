"""An OpenAI Agents SDK ``Session`` backed by the middleware (``pip install "token-middleware[agents]"``).

    from agents import Agent, Runner
    from middleware import AsyncSessionManager
    from middleware.adapters.agents import MiddlewareSession

    session = MiddlewareSession("user-42", AsyncSessionManager(redis_url="redis://127.0.0.1:6379/0"))
    await Runner.run(agent, "goto shop", session=session)

``get_items`` returns the composed, trimmed memory (context and notes as a system item, the
summary exchange, the last turn) instead of every item ever said; ``add_items`` records each
turn once it is whole (the user's input, the tool calls with their outputs, the final reply).
The SDK's own Session protocol is followed: get_items, add_items, pop_item, clear_session.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from ..core.conversation import content_text
from ..exceptions import require
from ..session.manager import AsyncSessionManager
from .memory import memory_messages, turns_in

__all__ = ["MiddlewareSession"]

require("agents", "agents", "openai-agents")


def chat_message(item: Mapping[str, Any]) -> dict[str, Any] | None:
    """A Responses API input item as an OpenAI chat message; None for items memory does not keep
    (reasoning, web search calls and the like)."""
    kind, role = item.get("type"), item.get("role")
    if kind in (None, "message") and role in ("user", "assistant", "system", "developer"):
        return {"role": role, "content": content_text(item.get("content"), "item")}
    if kind == "function_call":
        call = {
            "id": item.get("call_id"),
            "type": "function",
            "function": {"name": item.get("name"), "arguments": item.get("arguments") or "{}"},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    if kind == "function_call_output":
        output = item.get("output")
        text = (
            output
            if isinstance(output, str)
            else content_text(output, "item")
            if isinstance(output, list)
            else json.dumps(output)
        )
        return {"role": "tool", "tool_call_id": item.get("call_id"), "content": text}
    return None


class MiddlewareSession:
    """An Agents SDK session whose history is the middleware's composed memory of ``session_id``.

    Items of a turn still in progress wait in this object until the turn is whole; recorded
    turns are kept in compact form (context keys, summary, last turn), so ``pop_item`` can
    only take back items of the turn in progress, and returns None otherwise."""

    session_settings: Any = None

    def __init__(self, session_id: str, manager: AsyncSessionManager | None = None, *, session_settings: Any = None) -> None:
        if manager is not None and not isinstance(manager, AsyncSessionManager):
            raise TypeError(
                f"MiddlewareSession needs an AsyncSessionManager (the Agents SDK awaits every session call), "
                f"not {type(manager).__name__[:60]}: pass AsyncSessionManager(...) with the same settings"
            )
        self.manager = manager if manager is not None else AsyncSessionManager()
        self._owns_manager = manager is None
        self.session_id = session_id
        self.session_settings = session_settings
        self._pending: list[Any] = []  # items of the turn in progress, as given
        self._lock = asyncio.Lock()

    @classmethod
    def from_url(cls, session_id: str, url: str, **kwargs: Any) -> MiddlewareSession:
        """A session on the store at ``url`` (``redis://…``), with a manager of its own that ``close()`` closes."""
        session = cls(session_id, AsyncSessionManager(redis_url=url, **kwargs))
        session._owns_manager = True
        return session

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The composed memory as input items, then the items of the turn in progress."""
        state = await self.manager.get_state(self.session_id)
        items: list[Any] = [*memory_messages(state, self.manager.config, self.manager.tokenizer), *self._pending]
        return items[-limit:] if limit else items

    async def add_items(self, items: list[Any]) -> None:
        """Take a run's new items; record every turn they make whole."""
        async with self._lock:
            self._pending += [dict(item) if isinstance(item, Mapping) else item for item in items]
            kept = [(item, chat_message(item) if isinstance(item, Mapping) else None) for item in self._pending]
            messages = [message for _, message in kept if message is not None]
            turns, used = turns_in(messages)
            for turn in turns:
                await self.manager.record_turn(
                    self.session_id, user=turn.user, assistant=turn.assistant, tool_calls=turn.tool_calls
                )
            if used:
                last = messages[used - 1]
                self._pending = self._pending[next(i for i, (_, m) in enumerate(kept) if m is last) + 1 :]

    async def pop_item(self) -> Any | None:
        """Take back the last item of the turn in progress (None when there is none)."""
        async with self._lock:
            return self._pending.pop() if self._pending else None

    async def clear_session(self) -> None:
        """Forget the session: its memory in the store and the turn in progress."""
        async with self._lock:
            self._pending.clear()
            await self.manager.reset(self.session_id)

    async def close(self) -> None:
        """Close the manager, when this session made it."""
        if self._owns_manager:
            await self.manager.close()
