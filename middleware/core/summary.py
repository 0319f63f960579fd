"""The rolling summary: one line per turn, ``• {user brief} → {action}``.

The action is, in order of preference: the configured template of each
successful tool call (``Navigated to 'shop' on google_tv``), the tool's own
observation of its result, the result's values quoted as JSON when they fit
whole in ``summary.result_chars`` (``get_watchlist: "NVDA", "OMEG"``), ``Used {tool}`` for
other successful calls, ``Tried {tool} (failed)`` when every call failed, else a
brief of the assistant's reply.
"""

from __future__ import annotations

import functools
import json
import math
import re
import unicodedata
from collections.abc import Iterator, Mapping
from typing import Any

from ..config.sections import SummaryConfig
from .context import sanitize_value
from .state import ToolCall, Turn
from .text import RESULT_DEPTH, RESULT_NOISE, SECRET_NAME, one_line, redact_secrets

__all__ = ["action_of", "actions_of", "summary_line"]

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


def _call_action(call: ToolCall, config: SummaryConfig, values: bool) -> tuple[str, str]:
    """The call's action without its result's values, and with them (when ``values``)."""
    name = one_line(call.name, 64)
    template = config.templates.get(call.name)
    rendered = _render_template(template, call.args) if template else None
    plain = rendered or (one_line(call.observation) if call.observation else "") or f"Used {name}"
    shown = _result_values(call, name, config) if values and not (rendered or call.observation) else ""
    return plain, shown or plain


def _scalars(value: Any, key: str = "", depth: int = 0) -> Iterator[tuple[bool, str]]:
    """The values of a JSON-like result in order: (True, its JSON) for a number, boolean or
    null, (False, the text) for a string, and (True, "") for every other part walked (a
    container, a field that only says how the call went: ``success``, ``status``...). A
    secret-named field, a part nested past ``RESULT_DEPTH`` or one JSON has no form for (bytes, a
    set, an object) raises ``_Unshown``."""
    if depth > RESULT_DEPTH or SECRET_NAME.search(key):
        raise _Unshown
    if isinstance(value, Mapping):
        yield True, ""
        for field, item in value.items():
            yield from _scalars(item, str(field), depth + 1)
    elif isinstance(value, (list, tuple)):
        yield True, ""
        for item in value:
            yield from _scalars(item, "", depth + 1)
    elif key in RESULT_NOISE:
        yield True, ""
    elif value is None or isinstance(value, bool):
        yield True, json.dumps(value)
    elif isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        yield True, (int.__repr__ if isinstance(value, int) else float.__repr__)(value)  # not a subclass's __str__
    elif isinstance(value, str):
        yield False, value
    else:
        raise _Unshown


_MAX_SHOWN_CALLS = 16  # a turn of more calls shows no values (the action has room for few)


class _Unshown(Exception):
    """A result the summary does not show."""


def _result_values(call: ToolCall, name: str, config: SummaryConfig) -> str:
    """``{tool}: {value}, {value}``, each value as JSON (``"NVDA"``, ``23.5``, ``false``): a
    short result's values, when all of them fit whole in ``summary.result_chars`` and the
    action in ``action_brief_chars`` (a value a later turn needs is then in the summary, where
    ``Used {tool}`` said nothing of it); "" for a longer result, which only the archive keeps."""
    limit, result = config.result_chars, call.result
    if limit <= 0 or result is None:
        return ""
    values: list[str] = []
    room = min(limit, config.action_brief_chars - len(name) - 2)
    try:
        for seen, (literal, value) in enumerate([(False, result)] if isinstance(result, str) else _scalars(result)):
            if seen > 4 * limit or len(value) > 4 * limit:
                return ""  # more parts than could fit, or a value far too long: not walked on
            text = value
            if not literal:  # the line's neutral form (no bullet, arrow or header) before it is quoted: it stays whole
                plain = one_line(value)
                if redact_secrets(plain) != plain or _names_header(plain, config):
                    return ""
                text = json.dumps(plain.translate(_LOOKALIKES), ensure_ascii=False) if plain else ""
            if text:
                room -= len(text) + 2 * bool(values)  # ", " between two
                if room < 0:
                    return ""
                values.append(text)
    except Exception:  # _Unshown, an int too long to write, a key's own __str__ raising
        return ""
    return f"{name}: {', '.join(values)}" if values else ""


def action_of(turn: Turn, config: SummaryConfig) -> str:
    """The action part of a turn's summary line, at most ``action_brief_chars`` long (a
    short result's values may stand for its call: ``actions_of`` gives it without them too)."""
    return actions_of(turn, config)[0]


def actions_of(turn: Turn, config: SummaryConfig) -> tuple[str, str]:
    """``action_of`` the turn with values and without (one walk of its results)."""
    succeeded = [call for call in turn.tool_calls if call.ok]
    values = len(succeeded) <= _MAX_SHOWN_CALLS
    if succeeded:
        plain, shown = (
            list(actions) for actions in zip(*(_call_action(call, config, values) for call in succeeded), strict=True)
        )
        bare = "; ".join(dict.fromkeys(plain))
        text = "; ".join(dict.fromkeys(shown))
        # Values whole or not at all: the longest give way while the action is too long, or
        # the line's neutral form would change it (a header's copy made of its parts).
        while shown != plain and (len(text) > config.action_brief_chars or _plain(text, config) != text):
            longest = max((i for i in range(len(shown)) if shown[i] != plain[i]), key=lambda i: len(shown[i]))
            shown[longest] = plain[longest]
            text = "; ".join(dict.fromkeys(shown))
    elif turn.tool_calls:
        names = dict.fromkeys(one_line(call.name, 64) for call in turn.tool_calls)
        text = bare = f"Tried {', '.join(names)} (failed)"
    else:
        text = bare = turn.assistant or "(no reply)"
    limit = config.action_brief_chars
    return one_line(text, limit) or "(no reply)", one_line(bare, limit) or "(no reply)"


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
    return one_line(_plain(text, config), limit)


def _names_header(text: str, config: SummaryConfig) -> bool:
    """Whether ``text`` holds the summary header's words (any case, spacing or punctuation)."""
    words = _NOT_WORD.sub("", config.header).casefold()
    return bool(words) and words in _NOT_WORD.sub("", text).casefold()


_NOT_WORD = re.compile(r"[\W_]+")


def _plain(text: str, config: SummaryConfig) -> str:
    """``_neutral`` without the cut to a limit."""
    text = one_line(text).translate(_LOOKALIKES)
    if config.header.strip():
        pattern, neutral = _header_pattern(config.header)
        text = pattern.sub(neutral, text)
    return text


def summary_line(turn: Turn, config: SummaryConfig, *, action: str | None = None) -> str:
    """``• {user brief} → {action}``; ``action`` is ``action_of(turn, config)`` when given."""
    user = _neutral(turn.user, config, config.user_brief_chars) or "(empty message)"
    action = (
        _neutral(action if action is not None else action_of(turn, config), config, config.action_brief_chars) or "(no reply)"
    )
    return f"{BULLET} {user} {ARROW} {action}"
