"""The rolling summary: one line per turn, ``• {user brief} → {action}``.

The action is, in order of preference: the configured template of each
successful tool call (``Navigated to 'shop' on google_tv``), ``Used {tool}`` for
successful calls without a template, ``Tried {tool} (failed)`` when every call
failed, else a brief of the assistant's reply.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config.sections import SummaryConfig
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
    return rendered or (one_line(call.observation) if call.observation else "") or f"Used {name}"


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


def _neutral(text: str, config: SummaryConfig) -> str:
    """``text`` unable to pass for summary structure: no bullet or arrow of a line of its
    own, no copy of the summary's header (a user could otherwise write a fake earlier turn)."""
    if BULLET in text or ARROW in text:
        text = text.replace(BULLET, "·").replace(ARROW, "->")
    if config.header and config.header in text:
        text = text.replace(config.header, config.header.translate(_BRACKETS))
    return text


_BRACKETS = str.maketrans("[]", "()")


def summary_line(turn: Turn, config: SummaryConfig, *, action: str | None = None) -> str:
    """``• {user brief} → {action}``; ``action`` is ``action_of(turn, config)`` when given."""
    user = one_line(_neutral(turn.user, config), config.user_brief_chars) or "(empty message)"
    action = _neutral(action if action is not None else action_of(turn, config), config)
    return f"{BULLET} {user} {ARROW} {action}"
