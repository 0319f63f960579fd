"""Scripted models: offline stand-ins for an LLM, for demos and tests.

A responder is a pure function ``(messages, tools) -> assistant message dict``
(``{"role": "assistant", "content": ..., "tool_calls": [...] | None}``).
``middleware.llm`` serves every registered responder through litellm as the
model ``scripted/<name>``, so scripted runs take the real litellm call path::

    from middleware.scripted import register

    def my_bot(messages, tools):
        return {"role": "assistant", "content": "pong", "tool_calls": None}

    register("pong", my_bot)          # now model="scripted/pong" works in chat()

Built in: ``scripted/echo`` (replies with the user's last message). The demo's
``scripted/atlas`` is registered when ``middleware.demo`` is imported.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .exceptions import LLMError

__all__ = ["Responder", "get_responder", "register"]

Responder = Callable[[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]] | None], Mapping[str, Any]]

_lock = threading.Lock()


def _echo(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    last_user = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), "")
    return {"role": "assistant", "content": f"echo: {last_user}", "tool_calls": None}


_responders: dict[str, Responder] = {"echo": _echo}


def register(name: str, responder: Responder) -> None:
    """Serve ``responder`` as the litellm model ``scripted/<name>``."""
    if not name or "/" in name:
        raise ValueError(f"Scripted model name {name!r} must be non-empty and hold no '/'.")
    with _lock:
        _responders[name] = responder


def get_responder(name: str) -> Responder:
    with _lock:
        responder = _responders.get(name)
        known = sorted(_responders)
    if responder is None:
        raise LLMError(f"No scripted model '{name[:100]}'; registered: {known}.")
    return responder
