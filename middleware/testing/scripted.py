"""Scripted models: offline stand-ins for an LLM, for demos and tests.

A responder is a pure function ``(messages, tools) -> assistant message dict``
(``{"role": "assistant", "content": ..., "tool_calls": [...] | None}``).
``middleware.llm`` serves every registered responder through litellm as the
model ``scripted/<name>``, so scripted runs take the real litellm call path::

    from middleware.scripted import register

    def my_bot(messages, tools):
        return {"role": "assistant", "content": "pong", "tool_calls": None}

    register("pong", my_bot)          # now model="scripted/pong" works in chat()

Built in: ``scripted/echo`` (replies with the user's last message), and the embedding
model ``scripted/hashed`` (words hashed into a normalised vector: texts sharing words
are near). The demo's ``scripted/atlas`` is registered when ``middleware.demo`` is imported.
``register_embedder(name, fn)`` serves ``fn(texts) -> vectors`` as ``scripted/<name>``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from ..exceptions import LLMError

__all__ = ["Embedder", "Responder", "get_embedder", "get_responder", "register", "register_embedder"]

Responder = Callable[[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]] | None], Mapping[str, Any]]
# texts -> one vector per text, all of one length
Embedder = Callable[[Sequence[str]], Sequence[Sequence[float]]]

_lock = threading.Lock()
T = TypeVar("T")


def _echo(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    last_user = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), "")
    return {"role": "assistant", "content": f"echo: {last_user}", "tool_calls": None}


_responders: dict[str, Responder] = {"echo": _echo}


def _hashed(texts: Sequence[str], dimensions: int = 256) -> list[list[float]]:
    """Bag of words hashed into ``dimensions`` buckets, normalised: texts that share words
    are near. A stand-in for a real embedding model in tests (no model, no network)."""
    import hashlib
    import math
    import re

    vectors = []
    for text in texts:
        vector = [0.0] * dimensions
        for word in re.findall(r"[^\W_]+", text.lower()):
            digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
            vector[int.from_bytes(digest, "big") % dimensions] += 1.0
        norm = math.sqrt(sum(v * v for v in vector)) or 1.0
        vectors.append([v / norm for v in vector])
    return vectors


_embedders: dict[str, Embedder] = {"hashed": _hashed}


class _Registry(Generic[T]):
    """What is served under ``scripted/<name>``, by name; thread-safe."""

    def __init__(self, kind: str, served: dict[str, T]) -> None:
        self.kind, self.served = kind, served

    def put(self, name: str, value: T) -> None:
        if not name or "/" in name:
            raise ValueError(f"Scripted {self.kind} name {name!r} must be non-empty and hold no '/'.")
        with _lock:
            self.served[name] = value

    def get(self, name: str) -> T:
        with _lock:
            value = self.served.get(name)
            known = sorted(self.served)
        if value is None:
            raise LLMError(f"No scripted {self.kind} '{name[:100]}'; registered: {known}.")
        return value


_models: _Registry[Responder] = _Registry("model", _responders)
_embedding_models: _Registry[Embedder] = _Registry("embedding model", _embedders)


def register(name: str, responder: Responder) -> None:
    """Serve ``responder`` as the litellm model ``scripted/<name>``."""
    _models.put(name, responder)


def get_responder(name: str) -> Responder:
    return _models.get(name)


def register_embedder(name: str, embedder: Embedder) -> None:
    """Serve ``embedder`` as the litellm embedding model ``scripted/<name>``."""
    _embedding_models.put(name, embedder)


def get_embedder(name: str) -> Embedder:
    return _embedding_models.get(name)
