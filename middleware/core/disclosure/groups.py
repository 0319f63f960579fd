"""Tools as disclosure sees them: an entry per schema, the group each belongs to, and the
opening a group's descriptions share. No I/O."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..lexical import tokens
from ..state import is_tool_name

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
    first = tokens(name)
    return first[0] if len(first) > 1 and first[0] not in _VERBS else None


def auto_groups(
    tools: Sequence[tuple[str, str | None]], skills: Mapping[str, str], descriptions: Sequence[str] = ()
) -> list[str]:
    """A group for each ``(name, origin)``: the skill that lists the tool (``skills``: tool
    name -> skill name), else its origin (the class of a bound method, the module of a
    function) when the other tools come from more than one, else the opening sentence its
    description (``descriptions``, in the same order) shares with others (an API's "This
    tool belongs to the travel system."): what a client that sends only schemas still says
    of its tools. Such a group is named by the namespace prefix its tools share when they
    are exactly that prefix's tools, else by its sentence's words. Else a namespace prefix
    two or more tools share, else ``tools``. A group's name is a tool name (``is_tool_name``: the
    model loads a group by it, and the loader's index lists it), else ``tools``: an origin
    such as a class made with ``type("...\\n...", ...)`` never becomes a line of that index."""
    rest = [(name, origin) for name, origin in tools if name not in skills]
    by_origin = len({origin for _, origin in rest if origin}) > 1
    prefix_of = {i: _prefix(name) for i, (name, _) in enumerate(tools) if name not in skills}
    openings = {} if by_origin else _openings(tools, skills, descriptions, prefix_of)
    prefixes = Counter(p for i, p in prefix_of.items() if p and i not in openings)
    groups = []
    for index, (name, origin) in enumerate(tools):
        prefix = prefix_of.get(index)
        if name in skills:
            groups.append(skills[name])
        elif by_origin and origin:
            groups.append(origin)
        elif index in openings:
            groups.append(openings[index])
        elif prefix and prefixes[prefix] > 1:
            groups.append(prefix)
        else:
            groups.append("tools")
    return [group if is_tool_name(group) else "tools" for group in groups]


# Words that name no API in an opening sentence ("This tool belongs to the ... system").
_GENERIC = frozenset(["a", "an", "and", "api", "apis", "belong", "belongs", "category", "for", "function", "functions", "in", "is", "it", "its", "of", "part", "provides", "set", "that", "the", "these", "this", "to", "tool", "tools", "which", "with"])  # fmt: skip


def _opening(description: str) -> str:
    """A description's first sentence, when it is long enough to name a group by."""
    ends = _SENTENCE_END.search(description)
    first = description[: ends.start() + 1] if ends else ""
    return first if len(first) >= _MIN_PREAMBLE_CHARS // 2 else ""


def _named(opening: str, taken: set[str]) -> str:
    """A group name from an opening sentence: its first words that say something, up to a
    comma or a relative clause ("the travel system, which ..." is ``travel_system``)."""
    head = re.split(r",|\b(?:which|that|who)\b", opening, maxsplit=1)[0]
    kept = [word for word in tokens(head) if word not in _GENERIC and word.isascii()][:3]
    name = "_".join(kept) or "tools"
    candidate, number = name, 2
    while candidate in taken:
        candidate, number = f"{name}_{number}", number + 1
    return candidate


def _openings(
    tools: Sequence[tuple[str, str | None]], skills: Mapping[str, str], descriptions: Sequence[str],
    prefix_of: Mapping[int, str | None],
) -> dict[int, str]:  # fmt: skip
    """The tools (by index) whose descriptions open with a sentence two or more share, each
    with its group's name: the prefix its tools share when they are all of that prefix's
    tools, else the sentence's words."""
    openings = {i: opening for i, (name, _) in enumerate(tools) if name not in skills and i < len(descriptions)
                and (opening := _opening(descriptions[i]))}  # fmt: skip
    members: dict[str, list[int]] = {}
    for index, opening in openings.items():
        members.setdefault(opening, []).append(index)
    taken, out = {*skills.values(), *(name for name, _ in tools)}, {}
    for opening, indexes in members.items():
        if len(indexes) < 2:
            continue
        prefixes = {prefix_of.get(i) for i in indexes}
        prefix = next(iter(prefixes)) if len(prefixes) == 1 else None
        exact = prefix is not None and sum(1 for p in prefix_of.values() if p == prefix) == len(indexes)
        name = prefix if exact and prefix is not None and prefix not in taken else _named(opening, taken)
        taken.add(name)
        out.update(dict.fromkeys(indexes, name))
    return out


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
