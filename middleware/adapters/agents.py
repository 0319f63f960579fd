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
import weakref
from collections.abc import Mapping
from typing import Any

from ..core.conversation import content_text
from ..exceptions import require
from ..session.manager import AsyncSessionManager
from .memory import memory_messages, turns_in, unrecordable

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


Pending = list[tuple[Any, "dict[str, Any] | None"]]

# Runs whose turn is in progress that one session keeps apart at most (the oldest is dropped
# beyond it: a run that died mid-turn leaves its items behind, and nothing else frees them).
MAX_RUNS_IN_PROGRESS = 256


class MiddlewareSession:
    """An Agents SDK session whose history is the middleware's composed memory of ``session_id``.

    Items of a turn still in progress wait in this object until the turn is whole; recorded
    turns are kept in compact form (context keys, summary, last turn), so ``pop_item`` can
    only take back items of the turn in progress, and returns None otherwise.

    Runs on one session at once (``asyncio.gather`` of several ``Runner.run``) each keep their
    own turn in progress: the SDK passes each call its run's context (``wrapper``), and a
    run's items are recorded as its own turn. An SDK that passes no context shares one turn
    in progress among the runs."""

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
        # Each run's items of its turn in progress, as given, each with its chat message (None:
        # not kept), by the run's context (None: calls that name no run).
        self._runs: dict[int | None, tuple[weakref.ref[Any] | None, Pending]] = {}
        self._lock = asyncio.Lock()

    def _pending(self, wrapper: Any, *, create: bool = False) -> Pending:
        """The turn in progress of the run ``wrapper`` is the context of."""
        for key in [key for key, (ref, _) in self._runs.items() if ref is not None and ref() is None]:
            del self._runs[key]  # runs that are gone; their ids may be reused
        key = None if wrapper is None else id(wrapper)
        if key in self._runs:
            return self._runs[key][1]
        pending: Pending = []
        if create:
            try:
                ref = None if wrapper is None else weakref.ref(wrapper)
            except TypeError:  # a context that cannot be referenced weakly: shared, as with none
                return self._pending(None, create=True)
            while len(self._runs) >= MAX_RUNS_IN_PROGRESS:
                del self._runs[next(iter(self._runs))]
            self._runs[key] = (ref, pending)
        return pending

    @classmethod
    def from_url(cls, session_id: str, url: str, **kwargs: Any) -> MiddlewareSession:
        """A session on the store at ``url`` (``redis://…``), with a manager of its own that ``close()`` closes."""
        session = cls(session_id, AsyncSessionManager(redis_url=url, **kwargs))
        session._owns_manager = True
        return session

    async def get_items(self, limit: int | None = None, *, wrapper: Any = None) -> list[Any]:
        """The composed memory as input items, then the items of the run's turn in progress."""
        state = await self.manager.get_state(self.session_id)
        items: list[Any] = [
            *memory_messages(state, self.manager.config, self.manager.tokenizer),
            *(item for item, _ in self._pending(wrapper)),
        ]
        return items[-limit:] if limit else items

    async def add_items(self, items: list[Any], *, wrapper: Any = None) -> None:
        """Take a run's new items; record every turn they make whole.

        Items that are not valid are refused before any is kept. A turn that can never be
        recorded (a message past the limits, say) is dropped from the turn in progress and
        its error raised, so it does not block later turns; turns recorded before it stay
        recorded, and are not recorded again. A turn whose store write failed stays pending
        and is recorded by the next call that succeeds."""
        async with self._lock:
            given = [dict(item) if isinstance(item, Mapping) else item for item in items]
            read = [(item, chat_message(item) if isinstance(item, Mapping) else None) for item in given]
            pending = self._pending(wrapper, create=True)
            pending += read
            kept = [(index, message) for index, (_, message) in enumerate(pending) if message is not None]
            done = 0  # items of the turn in progress recorded, or dropped as unrecordable
            try:
                for turn, used in turns_in([message for _, message in kept]):
                    end = kept[used - 1][0] + 1
                    try:
                        await self.manager.record_turn(
                            self.session_id, user=turn.user, assistant=turn.assistant, tool_calls=turn.tool_calls
                        )
                    except Exception as exc:
                        if unrecordable(exc):
                            done = end
                        raise
                    done = end
            finally:
                del pending[:done]

    async def pop_item(self, *, wrapper: Any = None) -> Any | None:
        """Take back the last item of the run's turn in progress (None when there is none)."""
        async with self._lock:
            pending = self._pending(wrapper)
            return pending.pop()[0] if pending else None

    async def clear_session(self, *, wrapper: Any = None) -> None:
        """Forget the session: its memory in the store and every run's turn in progress."""
        async with self._lock:
            self._runs.clear()
            await self.manager.reset(self.session_id)

    async def close(self) -> None:
        """Close the manager, when this session made it."""
        if self._owns_manager:
            await self.manager.close()
