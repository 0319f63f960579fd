"""What is specific in a text: a number, a name (a capitalised word after the first, in any
script), a code or an amount. Memory is for specifics: recall weighs a user's sentence
that names nothing at half, and a neighbour or a reworded line joins only with a specific
word of its own. No I/O."""

from __future__ import annotations

import functools
import re

from .lexical import terms

__all__ = ["specific", "specific_terms"]


def _letters(cased: str) -> str:
    """A character class body of every letter (of any script, below U+10000) for which
    ``str.isupper`` or ``str.islower`` (``cased``) holds, as ranges."""
    test = str.isupper if cased == "upper" else str.islower
    points = [c for c in range(0x10000) if test(chr(c)) and chr(c).isalpha()]
    ranges, start = [], points[0]
    for before, after in zip(points, [*points[1:], -1], strict=True):
        if after != before + 1:
            ranges.append(re.escape(chr(start)) + (f"-{re.escape(chr(before))}" if before > start else ""))
            start = after
    return "".join(ranges)


@functools.cache
def _patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """What is specific in a sentence (a number, a capitalised word after the first, a code
    or an amount), and a specific word (see ``specific_terms``); capitals of any script:
    "Zoë", "Łódź" and "Ölberg" name something as "Oslo" does. Compiled on first use: their
    classes take a scan of every code point, not import time's work."""
    upper, lower = _letters("upper"), _letters("lower")
    return (re.compile(rf"\d|(?<![.!?]\s)(?<=\s)[{upper}][{lower}]|[{upper}]{{2,}}|[$€£¥]"),
            re.compile(rf"(?<![.!?]\s)(?<=\W)[{upper}][\w-]*|[\w-]*\d[\w-]*"))  # fmt: skip


@functools.lru_cache(maxsize=4096)
def specific_terms(text: str) -> frozenset[str]:
    """The terms of ``text``'s specific words: capitalised after its first word (not opening
    a sentence), or holding a digit (cached as ``specific`` is)."""
    return frozenset(terms(" ".join(_patterns()[1].findall(text))))


@functools.lru_cache(maxsize=4096)
def specific(text: str) -> bool:
    """Whether a sentence names something specific after its first letter (cached: the
    same pieces come back as candidates call after call, and the search is slow)."""
    return _patterns()[0].search(text[1:]) is not None
