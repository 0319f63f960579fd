"""Tools as disclosure sees them: an entry per schema, the group each belongs to, and the
opening a group's descriptions share. No I/O."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .matching import WORD

__all__ = ["ToolEntry", "auto_groups", "description_of", "entry_of", "shared_preamble", "without_preamble"]

# A sentence's end within a description: a preamble is cut after one.
_SENTENCE_END = re.compile(r"[.:;!?]\s+")
_MIN_PREAMBLE_CHARS = 40  # shorter shared openings are not worth the lookup
_VERBS = frozenset(
    [
        "add",
        "book",
        "buy",
        "calculate",
        "cancel",
        "check",
        "close",
        "compute",
        "convert",
        "copy",
        "create",
        "delete",
        "disable",
        "display",
        "do",
        "download",
        "edit",
        "enable",
        "fetch",
        "find",
        "get",
        "has",
        "is",
        "list",
        "load",
        "lock",
        "make",
        "move",
        "open",
        "place",
        "post",
        "press",
        "put",
        "read",
        "release",
        "remove",
        "run",
        "save",
        "search",
        "sell",
        "send",
        "set",
        "show",
        "start",
        "stop",
        "turn",
        "unlock",
        "update",
        "upload",
        "view",
        "write",
    ]
)
_NAMESPACE = re.compile(r"^(.+?)(?:__|\.|/|:)")


_NAMESPACE = re.compile(r"^(.+?)(?:__|\.|/|:)")


@dataclass(frozen=True, slots=True)
class ToolEntry:
    """One tool as disclosure sees it: its schema, its group, and the text matching reads."""

    name: str
    group: str
    schema: Mapping[str, Any]
    text: str


def entry_of(schema: Mapping[str, Any], group: str) -> ToolEntry:
    """The entry of an OpenAI tool schema in ``group``; matching reads its name twice (names
    weigh most), its description and its parameters' names and descriptions."""
    function = schema.get("function") or {}
    name = str(function.get("name") or "")
    parts = [name, name, str(function.get("description") or "")]
    properties = (function.get("parameters") or {}).get("properties") or {}
    if isinstance(properties, Mapping):
        for key, spec in properties.items():
            parts.append(str(key))
            if isinstance(spec, Mapping):
                parts.append(str(spec.get("description") or ""))
    return ToolEntry(name=name, group=group, schema=schema, text=" ".join(parts))


def _prefix(name: str) -> str | None:
    """A namespace prefix of a tool name (``github__create_issue``, ``fs.read``, ``slack_post``)."""
    match = _NAMESPACE.match(name)
    if match:
        return match.group(1)
    first = WORD.findall(name)
    return first[0].lower() if first and first[0].lower() not in _VERBS and len(first) > 1 else None


def auto_groups(tools: Sequence[tuple[str, str | None]], skills: Mapping[str, str]) -> list[str]:
    """A group for each ``(name, origin)``: the skill that lists the tool (``skills``: tool
    name -> skill name), else its origin (the class of a bound method, the module of a
    function) when the other tools come from more than one, else a namespace prefix two or
    more tools share, else ``tools``."""
    rest = [(name, origin) for name, origin in tools if name not in skills]
    origins = {origin for _, origin in rest if origin}
    by_origin = len(origins) > 1
    prefixes = Counter(p for name, _ in rest if (p := _prefix(name)))
    groups = []
    for name, origin in tools:
        prefix = _prefix(name)
        if name in skills:
            groups.append(skills[name])
        elif by_origin and origin:
            groups.append(origin)
        elif prefix and prefixes[prefix] > 1:
            groups.append(prefix)
        else:
            groups.append("tools")
    return groups


def shared_preamble(descriptions: Sequence[str]) -> str:
    """The whole sentences that every one of two or more descriptions opens with (at least
    40 characters, trailing whitespace included), when each description goes on after them; else ""."""
    if len(descriptions) < 2:
        return ""
    first, last = min(descriptions), max(descriptions)  # the common prefix of all is theirs
    length = next((i for i, (a, b) in enumerate(zip(first, last, strict=False)) if a != b), min(len(first), len(last)))
    ends = [match.end() for match in _SENTENCE_END.finditer(first[:length])]
    cut = first[: ends[-1]] if ends else ""
    if len(cut.strip()) < _MIN_PREAMBLE_CHARS or any(not text[len(cut) :].strip() for text in descriptions):
        return ""
    return cut


def without_preamble(schema: Mapping[str, Any], preamble: str) -> dict[str, Any]:
    function = dict(schema["function"])
    function["description"] = str(function["description"])[len(preamble) :].lstrip()
    return {**schema, "function": function}


def description_of(schema: Mapping[str, Any]) -> str:
    description = (schema.get("function") or {}).get("description")
    return description if isinstance(description, str) else ""
