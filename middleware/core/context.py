"""Context keys: working parameters taken from the arguments of successful tool calls.

Tracked mode (``context.keys`` set): only those keys, from calls of
``context.tools`` (every tool when unset). Auto mode (no keys): every scalar
argument with a usable name. Last value wins. Values are sanitized to one line
and capped, so a tool argument cannot add a line or a section to the prompt.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..config.sections import KEY_NAME, ContextConfig
from .state import ToolCall, compact_json
from .text import RESULT_NOISE, one_line

__all__ = ["extract_context", "render_context", "render_earlier", "sanitize_key", "sanitize_value"]

_SCALARS = (str, int, float, bool)


def sanitize_key(key: Any) -> str | None:
    """A key name that is safe to print, or None: names are identifiers, never free text."""
    return key if isinstance(key, str) and KEY_NAME.fullmatch(key) else None


def sanitize_value(value: Any, limit: int) -> str | None:
    """One printable line of at most ``limit`` characters, or None when nothing is left."""
    if value is None:
        return None
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, _SCALARS):
        text = str(value)
    else:
        try:
            text = compact_json(value)
        except Exception:  # default=str runs user __str__ code, which may raise anything
            return None
    return one_line(text, limit) or None


_LIST_ITEMS = 8


def _tool_counts(call: ToolCall, config: ContextConfig) -> bool:
    return call.ok and call.args is not None and (config.tools is None or call.name in config.tools)


def _auto_value(value: Any) -> Any:
    """What auto mode keeps: scalars, and short lists of scalars (joined with commas)."""
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, (list, tuple)) and 0 < len(value) <= _LIST_ITEMS and all(isinstance(v, _SCALARS) for v in value):
        return ", ".join(str(v) for v in value)
    return None


def _candidates(call: ToolCall, config: ContextConfig) -> Iterable[tuple[Any, Any]]:
    """Argument pairs, then (with from_results) scalar fields of a JSON-object result."""
    assert call.args is not None
    sources: list[Mapping[Any, Any]] = [call.args]
    if config.from_results and isinstance(call.result, Mapping):
        sources.append({k: v for k, v in call.result.items() if k not in RESULT_NOISE and not isinstance(v, bool)})
    for source in sources:
        if config.auto:
            yield from ((k, v) for k, v in ((k, _auto_value(v)) for k, v in source.items()) if v is not None)
        else:
            yield from ((k, source[k]) for k in config.keys or () if k in source)


def extract_context(tool_calls: Iterable[ToolCall], config: ContextConfig) -> tuple[tuple[str, str], ...]:
    """The (key, value) pairs a turn sets, in order, each key once with its last value."""
    found: dict[str, str] = {}
    for call in tool_calls:
        if not _tool_counts(call, config):
            continue
        for raw_key, raw_value in _candidates(call, config):
            key = sanitize_key(raw_key)
            value = sanitize_value(raw_value, config.max_value_chars)
            if key is not None and value is not None:
                found.pop(key, None)  # re-insert so the order is the order of last setting
                found[key] = value
    # A single turn cannot set more keys than are kept.
    return tuple(found.items())[-config.max_keys :]


# A value shown as it is: one word of letters, digits and the marks ids and paths use.
_BARE = re.compile(r"[\w.@:/+\-]{1,64}")


def quoted_value(value: str, limit: int) -> str:
    """A context value as the prompt shows it: one line, cut to ``limit`` characters; a single
    word (an id, a name, a number) as it is, anything else (words with spaces, markup) as a
    JSON string, so that what a user or a tool put in it reads as data, never as an
    instruction or a heading of the prompt (recalled text is shown the same way)."""
    text = one_line(value, limit)
    return text if _BARE.fullmatch(text) else compact_json(text)


def _label(key: str, config: ContextConfig) -> str:
    """How a key is named in the prompt: its configured label, else the key, which the store
    only ever holds as an identifier; a state built by hand may hold anything, shown as data
    (a JSON string), so it cannot add a line or a heading."""
    label = config.labels.get(key)
    if label is not None:
        return label
    return key if KEY_NAME.fullmatch(key) else compact_json(one_line(key, 64))


def render_context(context: Mapping[str, str], config: ContextConfig) -> str:
    """The Current Context section, or "" when there is nothing to show."""
    if not context:
        return ""
    lines = [config.header]
    for key, value in context.items():
        lines.append(f"- {_label(key, config)}: {quoted_value(value, config.max_value_chars)}")
    return "\n".join(lines)


def render_earlier(earlier: Mapping[str, str], config: ContextConfig) -> str:
    """The section of keys set before the current ones (``context.earlier_keys``), one
    ``key=value`` line each (a key is an identifier, so a value cannot start a line), or ""."""
    if not earlier:
        return ""
    lines = [config.earlier_header]
    lines += (f"{_label(key, config)}={quoted_value(value, config.max_value_chars)}" for key, value in earlier.items())
    return "\n".join(lines)


def order_context(context: Mapping[str, str], config: ContextConfig) -> dict[str, str]:
    """Prompt order: configured key order when tracking keys, else by name.

    A stable order keeps the system prompt byte-identical while values do not change.
    """
    if config.keys is not None:
        return {key: context[key] for key in config.keys if key in context}
    return {key: context[key] for key in sorted(context)}
