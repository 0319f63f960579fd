"""The rolling summary: one line per turn, ``• {user brief} → {action}``.

The action is, in order of preference: the configured template of each
successful tool call (``Navigated to 'shop' on google_tv``), the tool's own
observation of its result, the result's values when they fit whole in
``summary.result_chars`` (``get_watchlist: NVDA, OMEG``), ``Used {tool}`` for
other successful calls, ``Tried {tool} (failed)`` when every call failed, else a
brief of the assistant's reply.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from ..config.sections import SummaryConfig
from .archive import leaves
from .context import sanitize_value
from .state import ToolCall, Turn
from .text import one_line

__all__ = ["action_of", "summary_line"]

BULLET = "•"
ARROW = "→"
_TEMPLATE_VALUE_CHARS = 60


def _render_template(template: str, args: Mapping[str, Any] | None) -> str | None:
    if args is None:
        return None
    values = {}
    for key, value in args.items():
        clean = sanitize_value(value, _TEMPLATE_VALUE_CHARS)
        if clean is not None and isinstance(key, str):
            values[key] = clean
    try:
        return template.format_map(values)
    except (KeyError, IndexError, ValueError):
        return None  # a field the call did not pass: fall back to "Used {tool}"


def _call_action(call: ToolCall, config: SummaryConfig) -> str:
    name = one_line(call.name, 64)
    template = config.templates.get(call.name)
    rendered = _render_template(template, call.args) if template else None
    observed = one_line(call.observation) if call.observation else ""
    return rendered or observed or _result_values(call, name, config.result_chars) or f"Used {name}"


def _result_values(call: ToolCall, name: str, limit: int) -> str:
    """``{tool}: {value}, {value}``: a short result's values, when all of them fit whole in
    ``limit`` characters (a value a later turn needs is then in the summary, where ``Used
    {tool}`` said nothing of it); "" for a longer result, which only the archive keeps."""
    if limit <= 0 or call.result is None:
        return ""
    found = [("", call.result)] if isinstance(call.result, str) else leaves(call.result)
    values: list[str] = []
    room = limit
    try:
        for _, value in found:
            text = one_line(value)
            if text:
                room -= len(text) + 2 * bool(values)  # ", " between two
                if room < 0:
                    return ""
                values.append(text)
    except Exception:  # str() of a value runs the tool's own __str__, which may raise anything
        return ""
    return f"{name}: {', '.join(values)}" if values else ""


def action_of(turn: Turn, config: SummaryConfig) -> str:
    """The action part of a turn's summary line, at most ``action_brief_chars`` long."""
    succeeded = [call for call in turn.tool_calls if call.ok]
    if succeeded:
        actions = dict.fromkeys(_call_action(call, config) for call in succeeded)
        text = "; ".join(actions)
    elif turn.tool_calls:
        names = dict.fromkeys(one_line(call.name, 64) for call in turn.tool_calls)
        text = f"Tried {', '.join(names)} (failed)"
    else:
        text = turn.assistant or "(no reply)"
    return one_line(text, config.action_brief_chars) or "(no reply)"


def _lookalikes() -> dict[int, str]:
    """Characters that could pass for the summary's bullet or arrow: every rightwards arrow
    of Unicode's arrow blocks (``⟶``, ``⇒``, ``➔``, ``⭢``...) becomes ``->``, bullets and
    round dots (``∙``, ``●``, ``⦁``...) become ``·``."""
    arrows = (
        (0x2190, 0x21FF),
        (0x2794, 0x27BF),
        (0x27F0, 0x27FF),
        (0x2900, 0x297F),
        (0x2B00, 0x2BFF),
        (0x1F800, 0x1F8FF),
        (0xFFE8, 0xFFEE),
    )
    table = {
        ord(c): "·"
        for c in BULLET + "\u2023\u2043\u204c\u204d\u2219\u23fa\u25cf\u25d8\u25e6\u2981\u29be\u29bf\u26ab\u2b24\U0001f784"
    }
    for first, last in arrows:
        for code in range(first, last + 1):
            name = unicodedata.name(chr(code), "")
            if ("RIGHTWARDS" in name or ("RIGHT" in name and ("ARROW" in name or "HARPOON" in name))) and "LEFT" not in name:
                table[code] = "->"
    return table


_LOOKALIKES = _lookalikes()
_BRACKETS = str.maketrans("[]", "()")
_WORD = re.compile(r"\w")


@functools.lru_cache(maxsize=8)
def _header_pattern(header: str) -> tuple[re.Pattern[str], str]:
    """What a copy of ``header`` looks like in one-line text, and what it becomes: any case,
    any spacing (or none: a zero-width space dropped leaves none), any punctuation for the
    header's (``［``, ``⟦`` for ``[``); it becomes the header with round brackets, or in
    brackets when it has none."""
    parts = []
    for char in header.strip():
        parts.append(r"\s*" if char.isspace() else re.escape(char) if _WORD.match(char) else r"\s*[^\w\s]\s*")
    pattern = re.sub(r"(?:\\s\*)+", r"\\s*", "".join(parts)).removeprefix(r"\s*").removesuffix(r"\s*")
    neutral = header.strip().translate(_BRACKETS)
    return re.compile(pattern, re.IGNORECASE), neutral if neutral != header.strip() else f"({neutral})"


def _neutral(text: str, config: SummaryConfig, limit: int) -> str:
    """``text`` as one line of at most ``limit`` characters, unable to pass for summary
    structure: no bullet or arrow (or a look-alike) of a line of its own, no copy of the
    summary's header (a user could otherwise write a fake earlier turn). It is checked
    after the text is made one line, so a line break or an invisible character cannot hide a copy."""
    text = one_line(text).translate(_LOOKALIKES)
    if config.header.strip():
        pattern, neutral = _header_pattern(config.header)
        text = pattern.sub(neutral, text)
    return one_line(text, limit)


def summary_line(turn: Turn, config: SummaryConfig, *, action: str | None = None) -> str:
    """``• {user brief} → {action}``; ``action`` is ``action_of(turn, config)`` when given."""
    user = _neutral(turn.user, config, config.user_brief_chars) or "(empty message)"
    action = (
        _neutral(action if action is not None else action_of(turn, config), config, config.action_brief_chars) or "(no reply)"
    )
    return f"{BULLET} {user} {ARROW} {action}"
