"""Wrapping an existing chatbot ``fn(messages, *args, **kwargs) -> reply``: the same turn as
``chat()``, with the chatbot making each LLM call.

The chatbot is handed the composed messages and, when it was given tools it can be handed
as a list (OpenAI schemas, ``Tool`` objects or callables with distinct names), the tools
the turn discloses: schemas exactly as ``chat()`` sends them (shared preambles and cache
breakpoints included), or its own ``Tool`` objects and callables as given. A reply that
only asks for the loader is answered here and the chatbot called again within the turn;
any other tool calls are the chatbot's to run. The model's caching rules are those of the
``model=`` keyword the chatbot is called with, else the configured model.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..core.effects import Io, Program
from ..core.replies import as_dict, interpret_reply
from ..core.state import Turn
from ..core.turnloop import TurnLoop
from ..exceptions import InvalidToolCallError, LLMError
from ..session.engine import Engine
from ..tools import Tool, ToolList, Toolset, as_tools
from .calls import Calls
from .plan import Request, TurnPlan

__all__ = ["NO_MESSAGE", "WrappedTurn", "wrapped_turn"]


def _call_blocking(fn: Callable[..., Any], messages: list[dict[str, Any]], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    reply = fn(messages, *args, **kwargs)
    if inspect.isawaitable(reply):
        if inspect.iscoroutine(reply):
            reply.close()  # never awaited: say so once, not as a RuntimeWarning too
        raise LLMError("The wrapped chatbot returned an awaitable: wrap an async function (async def) instead.")
    return reply


def _message(reply: Any) -> dict[str, Any] | None:
    """The assistant message of a reply that is one (a response, a message dict, or a list
    holding only that message: one call's reply in the shape of a chatbot's own rounds),
    else None."""
    if hasattr(reply, "choices"):
        return as_dict(reply.choices[0].message)
    if (
        isinstance(reply, (list, tuple))
        and len(reply) == 1
        and (isinstance(reply[0], Mapping) or hasattr(reply[0], "model_dump"))
    ):
        reply = as_dict(reply[0])
        if reply.get("role") != "assistant":
            return None
    if not isinstance(reply, Mapping):
        return None
    message = dict(reply)
    if message.get("tool_calls"):  # the SDK's call objects as dicts, as the tool loop reads them
        message["tool_calls"] = [as_dict(call) for call in message["tool_calls"]]
    return message


def _loader_only(message: Mapping[str, Any] | None, loader: str | None) -> bool:
    """Whether ``message`` only asks for the loader (a chatbot that makes one LLM call and
    hands tool calls back)."""
    calls = [as_dict(call) for call in (message or {}).get("tool_calls") or ()]
    return bool(calls) and loader is not None and all((call.get("function") or {}).get("name") == loader for call in calls)


def _readable_tools(given: Any) -> list[Tool]:
    """The tools a wrapped chatbot is handed, when the middleware can read them (a list of
    schemas, Tools or callables with distinct names); otherwise none, and ``tools`` reaches
    the chatbot as given."""
    if not isinstance(given, (list, tuple)) or not given:
        return []
    try:
        tools = as_tools(given)
        Toolset(tools)  # distinct names
    except InvalidToolCallError:
        return []
    return tools


class WrappedTurn:
    """A turn of the chatbot ``fn`` (see the module docstring)."""

    def __init__(self, engine: Engine, fn: Callable[..., Any], session_id: Any, args: tuple[Any, ...], kwargs: dict[str, Any]):
        self.engine, self.fn, self.args, self.kwargs = engine, fn, args, dict(kwargs)
        self.session_id, _ = engine.checked(session_id)
        given = kwargs.get("tools")
        self.tools = _readable_tools(given)
        self.originals = dict(zip((tool.name for tool in self.tools), given or (), strict=False))
        self.callables = bool(self.tools) and not all(isinstance(item, Mapping) for item in given or ())
        model = kwargs.get("model")
        self.model = model if isinstance(model, str) and model else None

    def program(self, user_message: Any) -> Program[Any]:
        engine = self.engine
        _, message = engine.checked(self.session_id, user_message)
        # The chatbot makes the call, through a client the middleware does not know: no tool references.
        plan: TurnPlan = yield from engine.plan_turn(self.session_id, message, model=self.model, toolset=Toolset(self.tools),
                                                     exact=self.callables, refer=False)  # fmt: skip
        calls = Calls(engine, plan, "wrap", TurnLoop(plan.prompt.messages, max_rounds=plan.max_rounds))
        while True:
            request, started = calls.request(), time.perf_counter()
            kwargs = self._handed(plan, request)
            reply = yield Io(functools.partial(_call_blocking, self.fn, request.messages, self.args, kwargs),
                             functools.partial(self.fn, request.messages, *self.args, **kwargs))  # fmt: skip
            _, _, usage, named = interpret_reply(reply)  # LLMError for a reply it cannot read
            said = _message(reply)
            known = named or self.model
            calls.made(
                request, said or {}, usage, time.perf_counter() - started, model=known or "wrapped", priced=known is not None
            )
            if not _loader_only(said, plan.loader) or calls.loop.rounds >= plan.max_rounds:
                break
            outcomes = [calls.answer(call, lambda *_: None) for call in calls.loop.take(said or {})]
            calls.loop.give([outcome for outcome in outcomes if outcome is not None])
            calls.round_done([outcome for outcome in outcomes if outcome is not None])
        text, ran, _, _ = interpret_reply(reply)
        # The loader rounds the turn answered came first: the chatbot's rounds count after
        # them, as chat() counts.
        after = calls.loop.rounds
        turn = Turn(user=message, assistant=text,
                    tool_calls=tuple(dataclasses.replace(call, round=call.round + after) for call in ran if call.name != plan.loader))  # fmt: skip
        yield from engine.record_planned(plan, turn, ended=True, billed=calls.first)
        return reply

    def _handed(self, plan: TurnPlan, request: Request) -> dict[str, Any]:
        """The keyword arguments the chatbot is called with: its own, with the tools the
        turn discloses in place of those it was given."""
        if not self.tools:
            return self.kwargs
        if plan.tools is None:  # every schema: as given, or as chat() sends them (with their breakpoints)
            return self.kwargs if self.callables else {**self.kwargs, "tools": request.schemas}
        handed = ToolList(plan.tools, self.originals, callables=self.callables,
                          schemas=None if self.callables else request.schemas, companions=plan.companions)  # fmt: skip
        return {**self.kwargs, "tools": handed}


# The default of a wrapped chatbot's user_message: called with one positional argument,
# it says how it is called instead of Python's "missing argument 'user_message'".
NO_MESSAGE: Any = object()


def wrapped_turn(
    engine: Engine, fn: Callable[..., Any], session_id: Any, user_message: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Program[Any]:
    """A turn of the chatbot ``fn(messages, *args, **kwargs) -> reply``: compose, call, record, log."""
    if user_message is NO_MESSAGE:
        name = getattr(fn, "__name__", "chatbot")[:60]
        raise TypeError(
            f"a wrapped chatbot is called as {name}(session_id, user_message, *args, **kwargs): it was given one "
            f"positional argument and no user_message; pass the session id first, e.g. {name}('user-42', text)"
        )
    return WrappedTurn(engine, fn, session_id, args, kwargs).program(user_message)
