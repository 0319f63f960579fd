"""Offline token counting with tiktoken, matching ``litellm.token_counter``.

tiktoken downloads its encoding files on first use. litellm ships the
cl100k_base, o200k_base and p50k_base files; when ``TIKTOKEN_CACHE_DIR`` is not
set we point it at that folder, found without importing litellm (which takes
seconds). The message arithmetic is litellm's: 3 tokens per message, every
string field counted, 1 more for a ``name``, tool calls counted by their
arguments, and 3 tokens priming the reply.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .core.composer import REPLY_PRIMING, TOKENS_PER_MESSAGE

__all__ = [
    "REPLY_PRIMING",
    "TOKENS_PER_MESSAGE",
    "Tokenizer",
    "context_window",
    "encoding_name_for_model",
    "get_tokenizer",
]

TOKENS_PER_NAME = 1
FALLBACK_ENCODING = "cl100k_base"
# Beyond this many characters a text is counted from evenly spaced samples.
_EXACT_CHARS = 200_000
# Texts up to this size are counted through an LRU cache (at most ~16 MB of keys).
_CACHED_CHARS = 8_192
_SAMPLES = 8

_lock = threading.Lock()


@functools.cache
def _litellm_dir() -> Path | None:
    """litellm's package folder, found without importing litellm (it takes seconds)."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _bundled_tokenizer_dir() -> Path | None:
    base = _litellm_dir()
    folder = base / "litellm_core_utils" / "tokenizers" if base else None
    return folder if folder is not None and folder.is_dir() else None


def _point_tiktoken_at_bundled_files() -> None:
    if os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR"):
        return
    folder = _bundled_tokenizer_dir()
    if folder is not None:
        os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)


def encoding_name_for_model(model: str) -> str:
    """The tiktoken encoding litellm uses for ``model`` (provider prefix ignored)."""
    import tiktoken

    name = model.rsplit("/", 1)[-1]
    if "gpt-4o" in name:
        return "o200k_base"
    try:
        return tiktoken.encoding_name_for_model(name)
    except KeyError:
        return FALLBACK_ENCODING


class Tokenizer:
    """Counts tokens of texts and OpenAI-format messages with one tiktoken encoding."""

    def __init__(self, encoding_name: str) -> None:
        import tiktoken

        self.encoding_name = encoding_name
        self._encoding = tiktoken.get_encoding(encoding_name)
        # Prompt parts repeat from call to call (roles, the system prompt while the context
        # is unchanged, the summary until the next turn): count each text once.
        self._cached = functools.lru_cache(maxsize=2048)(self._count_exact)

    def _count_exact(self, text: str) -> int:
        # encode_ordinary: text such as "<|endoftext|>" is counted, never refused.
        return len(self._encoding.encode_ordinary(text))

    def count(self, text: str) -> int:
        if len(text) <= _CACHED_CHARS:
            return self._cached(text)
        if len(text) <= _EXACT_CHARS:
            return self._count_exact(text)
        step = _EXACT_CHARS // _SAMPLES
        last = len(text) - step
        samples = [text[last * i // (_SAMPLES - 1) :][:step] for i in range(_SAMPLES)]
        return round(sum(map(self._count_exact, samples)) * len(text) / (step * _SAMPLES))

    def count_chat(self, role: str, content: str) -> int:
        """Tokens of a plain ``{"role": role, "content": content}`` message."""
        return TOKENS_PER_MESSAGE + self.count(role) + self.count(content)

    def count_message(self, message: Mapping[str, Any]) -> int:
        total = TOKENS_PER_MESSAGE
        for key, value in message.items():
            if value is None:
                continue
            if key == "tool_calls" and isinstance(value, list):
                total += sum(self.count(str(call.get("function", {}).get("arguments", ""))) for call in value)
            elif isinstance(value, str):
                total += self.count(value)
                if key == "name":
                    total += TOKENS_PER_NAME
            elif key == "content" and isinstance(value, list):
                total += sum(
                    self.count(part["text"]) for part in value if isinstance(part, Mapping) and isinstance(part.get("text"), str)
                )
        return total

    def cut_middle(self, text: str, max_tokens: int, marker: str) -> str:
        """``text`` within ``max_tokens`` (the marker included): its first and last tokens
        around ``marker``. Returned unchanged when it already fits."""
        tokens = self._encoding.encode_ordinary(text)
        if len(tokens) <= max_tokens:
            return text
        keep = max(max_tokens - self.count(marker), 0)
        head, tail = keep - keep // 2, keep // 2
        end = self._encoding.decode(tokens[-tail:], errors="replace") if tail else ""
        return (self._encoding.decode(tokens[:head], errors="replace") + marker + end).strip()

    def count_messages(self, messages: Iterable[Mapping[str, Any]]) -> int:
        """Prompt tokens of a whole request: every message plus the reply priming."""
        return sum(map(self.count_message, messages)) + REPLY_PRIMING


@functools.lru_cache(maxsize=32)
def _tokenizer_for_encoding(encoding_name: str) -> Tokenizer:
    with _lock:
        _point_tiktoken_at_bundled_files()
        try:
            return Tokenizer(encoding_name)
        except Exception:
            if encoding_name == FALLBACK_ENCODING:
                raise
    # The encoding file is not available offline (r50k_base, say): count with the fallback.
    from .events import log

    log.warning("tokens.encoding_unavailable", encoding=encoding_name, using=FALLBACK_ENCODING)
    return _tokenizer_for_encoding(FALLBACK_ENCODING)


def _price_map_path() -> Path | None:
    base = _litellm_dir()
    path = base / "model_prices_and_context_window_backup.json" if base else None
    return path if path is not None and path.is_file() else None


@functools.cache
def _context_windows() -> dict[str, int]:
    """Input token limits from litellm's bundled price map, read without importing litellm."""
    import json

    path = _price_map_path()
    if path is None:
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    windows = {}
    for name, info in data.items():
        limit = info.get("max_input_tokens") or info.get("max_tokens") if isinstance(info, dict) else None
        if isinstance(limit, int) and limit > 0:
            windows[name] = limit
    return windows


def context_window(model: str) -> int | None:
    """The model's input token limit from litellm's local price map, or None when unknown.

    Scripted models (``scripted/...``) have gpt-4o-mini's window.
    """
    if model.startswith("scripted/"):
        model = "gpt-4o-mini"
    windows = _context_windows()
    return windows.get(model) or windows.get(model.split("/", 1)[-1])


def get_tokenizer(model: str | None = None, *, encoding: str | None = None) -> Tokenizer:
    """The shared tokenizer for ``encoding``, or for ``model`` when no encoding is forced."""
    name = encoding or encoding_name_for_model(model or "gpt-4o-mini")
    return _tokenizer_for_encoding(name)
