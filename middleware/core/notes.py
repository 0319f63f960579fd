"""Long-term notes: Markdown the agent keeps per (user, agent), and its edit operations.

The operations of the design notes (seeds/004), as pure functions on the text::

    read                        the notes as they are
    overwrite(content)          replace everything
    append(content)             add at the end (a blank line between blocks)
    prepend(content)            add at the start
    replace_section_by_header(section_header, content)
                                replace the body under a header (the section is added
                                at the end when no such header exists)
    delete_section_by_header(section_header)
                                remove a header and its body (error if absent)
    delete_all_notes            empty the notes

A section is a Markdown header line (``#`` to ``######``) and everything up to the
next header of the same or a higher level. Headers match case-insensitively,
with or without their leading ``#``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from ..exceptions import NotesError
from .text import CUT_MARKER, clean_text, drop_invisible, squeeze_blank_lines

__all__ = [
    "NOTES_CUT_LINE",
    "OPERATIONS",
    "WRITES",
    "apply_operation",
    "cut_notes",
    "notes_tool_schema",
    "render_notes",
    "sections",
]

Operation = Literal[
    "read", "overwrite", "append", "prepend", "replace_section_by_header", "delete_section_by_header", "delete_all_notes"
]
OPERATIONS: tuple[str, ...] = Operation.__args__  # type: ignore[attr-defined]
WRITES = frozenset(OPERATIONS) - {"read"}
_HEADER = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")


@dataclass(frozen=True, slots=True)
class Section:
    level: int
    title: str
    start: int  # line index of the header
    end: int  # line index after the section's last line


def sections(text: str) -> list[Section]:
    """The header sections of ``text``, in order."""
    lines = text.split("\n")
    headers = [(i, len(m.group(1)), m.group(2).strip()) for i, line in enumerate(lines) if (m := _HEADER.match(line))]
    found = []
    for position, (index, level, title) in enumerate(headers):
        end = next((i for i, lvl, _ in headers[position + 1 :] if lvl <= level), len(lines))
        found.append(Section(level, title, index, end))
    return found


def _normalize_header(header: str) -> str:
    return header.strip().lstrip("#").strip().casefold()


def _find(text: str, header: str) -> Section | None:
    wanted = _normalize_header(header)
    return next((s for s in sections(text) if s.title.casefold() == wanted), None)


def _join(*blocks: str) -> str:
    return "\n\n".join(block.strip("\n") for block in blocks if block.strip())


def apply_operation(
    notes: str, operation: str, *, content: str | None = None, section_header: str | None = None, max_chars: int = 20_000
) -> tuple[str, str]:
    """Apply one operation; returns (new notes, what to tell the caller).

    Raises NotesError naming what is wrong: an unknown operation, missing content or
    header, an absent section to delete, or notes that would exceed ``max_chars``.
    """
    if operation not in OPERATIONS:
        raise NotesError(f"Unknown notes operation {str(operation)[:40]!r}; expected one of {list(OPERATIONS)}.")
    if operation in {"overwrite", "append", "prepend", "replace_section_by_header"} and (
        content is None or not str(content).strip()
    ):
        raise NotesError(f"Notes operation '{operation}' needs non-empty content.")
    if operation in {"replace_section_by_header", "delete_section_by_header"} and (
        not section_header or not _normalize_header(section_header)
    ):
        raise NotesError(f"Notes operation '{operation}' needs a section_header.")
    text = str(content) if content is not None else ""
    if operation == "read":
        return notes, notes or "(no notes yet)"
    if operation == "overwrite":
        result = text.strip("\n")
    elif operation == "append":
        result = _join(notes, text)
    elif operation == "prepend":
        result = _join(text, notes)
    elif operation == "delete_all_notes":
        result = ""
    elif operation == "delete_section_by_header":
        section = _find(notes, section_header or "")
        if section is None:
            # The error names the header asked for, not the notes' own (their text stays out of errors and logs).
            raise NotesError(
                f"No section {str(section_header)[:60]!r} in the notes ({len(sections(notes))} sections); read the notes for their headers."
            )
        lines = notes.split("\n")
        result = "\n".join(lines[: section.start] + lines[section.end :]).strip("\n")
    else:  # replace_section_by_header
        result = _replace_section(notes, section_header or "", text)
    result = squeeze_blank_lines(result).strip("\n")
    if len(result) > max_chars:
        raise NotesError(f"The notes would hold {len(result):,} characters; the limit is {max_chars:,} (notes.max_chars).")
    return result, f"notes {operation.replace('_', ' ')}: done ({len(result):,} characters)"


def _replace_section(notes: str, header: str, body: str) -> str:
    section = _find(notes, header)
    body_lines = body.strip("\n").split("\n")
    # A body that repeats the header is not given two headers.
    if body_lines and (m := _HEADER.match(body_lines[0])) and m.group(2).strip().casefold() == _normalize_header(header):
        body_lines = body_lines[1:]
    if section is None:
        title = header.strip().lstrip("#").strip()
        return _join(notes, "\n".join([f"## {title}", *body_lines]))
    lines = notes.split("\n")
    replaced = [lines[section.start], *body_lines, ""]
    return "\n".join(lines[: section.start] + replaced + lines[section.end :])


def render_notes(notes: str, header: str) -> str:
    """The notes section of the system prompt: every line quoted, so nothing inside the
    notes (a header, a role marker) can start a section or a line of instructions."""
    body = [_clean_line(line) for line in notes.strip().splitlines()] if notes.strip() else []
    if not body:
        return ""
    return "\n".join([header, *(f"> {line}" if line else ">" for line in body)])


def _clean_line(line: str) -> str:
    """One line as written (indentation kept), without control, format or invisible characters."""
    text = drop_invisible(clean_text(line).replace("\t", "    "))
    if not text.isprintable():
        # Keep plain spaces; drop control, format and every other separator character.
        text = "".join(c for c in text if c == " " or unicodedata.category(c)[0] not in "CZ")
    return text.rstrip()


def notes_tool_schema(name: str = "manage_long_term_memory") -> dict[str, Any]:
    """The OpenAI tool schema of the notes tool (the design notes' ManageLTMInput)."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": (
                "Read or edit your long-term notes about this user (Markdown, kept across sessions). "
                "Use it to remember lasting preferences and facts, not the current conversation."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "operation": {"type": "string", "enum": list(OPERATIONS), "description": "what to do; 'read' by default"},
                    "content": {"type": "string", "description": "the Markdown to write (write operations)"},
                    "section_header": {"type": "string", "description": "the header of the section (section operations)"},
                },
                "required": ["operation"],
            },
        },
    }


class _Counter(Protocol):
    def count(self, text: str) -> int: ...
    def cut_middle(self, text: str, max_tokens: int, marker: str) -> str: ...


# The line that marks where the notes were cut: the one line of their section not quoted.
NOTES_CUT_LINE = CUT_MARKER.strip()
# Where the tokenizer cuts the notes' text (the notes hold no control character).
_SPLIT = "\x00"
# Tokens kept spare when the notes' text is cut within lines: the quote mark put back on
# the cut line, and tokens merging differently where the text was cut.
_REQUOTE_TOKENS = 4


def cut_notes(rendered: str, header: str, max_tokens: int, tokenizer: _Counter) -> str:
    """Rendered notes cut to ``max_tokens``: the heading whole, then quoted lines from the
    start and from the end around a line of its own marking the cut (the one body line
    not quoted, so it cannot be the notes'); "" when the heading and the mark do not fit.
    Whole lines where one fits at either end, else the ends of the text re-quoted."""
    count = tokenizer.count
    body = rendered.removeprefix(header + "\n")  # the heading is kept whole, even of several lines
    lines = body.split("\n")

    def section(head: Sequence[str], tail: Sequence[str]) -> str:
        return "\n".join([header, *head, NOTES_CUT_LINE, *tail])

    room = max_tokens - count(section((), ()))
    if room < 0:
        return ""
    sizes = [count("\n" + line) for line in lines]

    def ends(head_room: int) -> tuple[list[str], list[str]]:
        start, used = 0, 0
        while start < len(lines) and used + sizes[start] <= head_room:
            used, start = used + sizes[start], start + 1
        end = len(lines)
        while end > start and used + sizes[end - 1] <= room:
            used, end = used + sizes[end - 1], end - 1
        return lines[:start], lines[end:]

    # Half the room for the start; all of it when no whole line fits that way.
    head, tail = ends(room - room // 2)
    if not head and not tail:
        head, tail = ends(room)
    if not head and not tail and room > _REQUOTE_TOKENS:
        head, tail = _quoted_ends(body, room - _REQUOTE_TOKENS, tokenizer)
    # Counted whole: tokens can merge across a line break, so the sum of the lines may be short.
    while (head or tail) and count(section(head, tail)) > max_tokens:
        head, tail = (head, tail[1:]) if len(tail) >= len(head) else (head[:-1], tail)
    return section(head, tail)


def _quoted_ends(body: str, room: int, tokenizer: _Counter) -> tuple[list[str], list[str]]:
    """The first and last tokens of quoted ``body`` within ``room``, as lines that each
    start with the quote mark (a cut line is quoted again)."""
    cut = tokenizer.cut_middle(body, room, _SPLIT)
    head_text, split, tail_text = cut.partition(_SPLIT)
    if not split:
        return body.split("\n"), []
    head = [line for line in head_text.rstrip().split("\n") if line]
    tail = [line for line in tail_text.lstrip("\n").split("\n") if line]
    if tail and not (tail[0] == ">" or tail[0].startswith("> ")):
        tail[0] = f"> {tail[0].lstrip('> ')}"
    return head, tail
