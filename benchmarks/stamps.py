"""Which commit each section of BENCHMARKS.md was measured at, and which are stale.

Every section says the commit it was measured at ("at commit 1a2b3c4"). A section is
stale when the code it measures changed between its commit and HEAD (the product,
``CODE``, and the benchmark's own modules, ``MODULES``); a Python or Lua file whose change
is only in comments or line breaks has not changed (``_same_code``), a docstring's has (a
docstring may be a tool's description):
``python -m benchmarks stale`` lists them, and the full run, which remakes every section
but the ones with commands of their own, says in the report which of those are stale.
"""

from __future__ import annotations

import io
import re
import subprocess
import tokenize
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CODE", "Section", "at_commit", "commit", "notice", "sections", "with_notice"]

ROOT = Path(__file__).resolve().parent.parent
CODE = ("middleware", "pyproject.toml")  # what every figure depends on
# Each section's own benchmark modules, by the opening of its title (git pathspecs).
MODULES = {
    "Summary": ("benchmarks/savings.py", "benchmarks/dataset.py", "benchmarks/overhead.py", "benchmarks/billing.py"),
    "1.": ("benchmarks/savings.py", "benchmarks/dataset.py"),
    "2.": ("benchmarks/overhead.py",),
    "3.": ("benchmarks/faults.py",),
    "4.": ("benchmarks/worked_example.py",),
    "5.": (
        "benchmarks/recall.py",
        "benchmarks/facts*.py",
        "benchmarks/savings.py",
        "benchmarks/overhead.py",
        "benchmarks/embeddings.py",
    ),
    "6.": ("benchmarks/billing.py", "benchmarks/served.py", "benchmarks/savings.py", "benchmarks/embeddings.py"),
    "7.": ("benchmarks/reliability.py",),
    "Attacks": ("benchmarks/attacks.py",),
    "A new user": ("benchmarks/newuser.py", "README.md", ".ci/run"),
    "8.": ("benchmarks/load.py",),
}
_STAMP = re.compile(r"\bat commit ([0-9a-f]{7,40})(\+changes)?")


def commit() -> str:
    """The commit measured (with "+changes" when the work tree differs from it in ``CODE``)."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", *CODE], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    return (head or "unknown") + ("+changes" if dirty else "")


def at_commit(measured: str | None = None) -> str:
    """The words that stamp a section: "at commit" and ``measured`` (by default, ``commit()``)."""
    return f"at commit {measured or commit()}"


@dataclass(frozen=True)
class Section:
    title: str  # the heading, without its hashes
    commit: str | None  # the commit measured (None: no stamp anywhere)
    dirty: bool  # measured with uncommitted changes on top of it
    changed: tuple[str, ...]  # files under CODE changed from it to HEAD (("?",) when git does not know it)

    @property
    def stale(self) -> bool:
        return self.commit is None or bool(self.changed)

    def describe(self) -> str:
        if self.commit is None:
            return f"{self.title}: says no commit"
        dirty = " with uncommitted changes" if self.dirty else ""
        if self.changed == ("?",):
            return f"{self.title}: at commit {self.commit}{dirty}, which this clone does not hold"
        if not self.changed:
            return f"{self.title}: at commit {self.commit}{dirty}, current"
        shown = ", ".join(self.changed[:3]) + (f" and {len(self.changed) - 3} more" if len(self.changed) > 3 else "")
        return f"{self.title}: at commit {self.commit}{dirty}; changed since: {shown}"


def _changed(commit: str, title: str, root: Path) -> tuple[str, ...]:
    known = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=root, capture_output=True)
    if known.returncode:
        return ("?",)
    own = next((paths for opening, paths in MODULES.items() if title.startswith(opening)), ("benchmarks",))
    diff = subprocess.run(["git", "diff", "--name-only", commit, "HEAD", "--", *CODE, *own], cwd=root, capture_output=True,
                          text=True)  # fmt: skip
    return tuple(path for path in diff.stdout.splitlines() if path and not _same_code(path, commit, root))


def _show(root: Path, revision: str, path: str) -> str | None:
    """The text of ``path`` at ``revision`` (None where it is not there)."""
    shown = subprocess.run(["git", "show", f"{revision}:{path}"], cwd=root, capture_output=True, text=True)
    return shown.stdout if shown.returncode == 0 else None


def _same_code(path: str, commit: str, root: Path) -> bool:
    """Whether ``path`` differs between ``commit`` and HEAD only in its comments and line
    breaks: Python compared token by token, Lua with its comments taken out; any other file,
    or one that cannot be read so, has changed."""
    if not path.endswith((".py", ".lua")):
        return False
    try:
        before, after = _show(root, commit, path), _show(root, "HEAD", path)
        if before is None or after is None:
            return False
        if path.endswith(".py"):
            return _python_tokens(before) == _python_tokens(after)
        if path.endswith(".lua"):
            return _lua_code(before) == _lua_code(after)
    except (tokenize.TokenError, SyntaxError, ValueError):  # UnicodeDecodeError is a ValueError
        return False
    return False


_LAYOUT = frozenset({tokenize.COMMENT, tokenize.NL, tokenize.ENCODING})


# Python 3.12+ splits an f-string into tokens, dropping the spaces inside its braces
# (f"{x = }" and f"{x=}" print differently): each f-string is compared as its source.
_FSTRING_START, _FSTRING_END = getattr(tokenize, "FSTRING_START", None), getattr(tokenize, "FSTRING_END", None)


def _python_tokens(text: str) -> list[tuple[int, str]]:
    """The module's tokens without comments and the line breaks inside statements; an
    f-string is one token of its source text, as Python 3.11 tokenizes it."""
    lines = io.StringIO(text).readlines()  # rows as tokenize counts them (splitlines also splits at \f, \x85, ...)
    kept: list[tuple[int, str]] = []
    depth, start = 0, (0, 0)
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == _FSTRING_START:
            depth, start = depth + 1, start if depth else token.start
        elif depth and token.type == _FSTRING_END:
            depth -= 1
            if not depth:
                kept.append((tokenize.STRING, _source(lines, start, token.end)))
        elif not depth and token.type not in _LAYOUT:
            kept.append((token.type, token.string))
    return kept


def _source(lines: list[str], start: tuple[int, int], end: tuple[int, int]) -> str:
    """The text from ``start`` to ``end`` (tokenize's (row, column) positions, rows from 1)."""
    (row, col), (end_row, end_col) = start, end
    if row == end_row:
        return lines[row - 1][col:end_col]
    return lines[row - 1][col:] + "".join(lines[row : end_row - 1]) + lines[end_row - 1][:end_col]


# An include line ("--#include order.lua", middleware/store/scripts.py) is code, not a comment.
_LUA = re.compile(
    r"""--\[(=*)\[.*?\]\1\]|--(?!#include)[^\n]*|\[(=*)\[.*?\]\2\]|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'""", re.DOTALL
)


def _lua_code(text: str) -> list[str]:
    """A Lua script's words and its strings whole, its comments left out (a ``--`` inside a
    string stays: what starts first is matched first)."""
    code: list[str] = []
    end = 0
    for match in _LUA.finditer(text):
        code += text[end : match.start()].split()
        if not match.group(0).startswith("--"):
            code.append(match.group(0))
        end = match.end()
    return code + text[end:].split()


def sections(report: str, root: Path = ROOT) -> list[Section]:
    """Every ``## `` section of ``report`` with the commit it was measured at."""
    _, *parts = re.split(r"^## ", report, flags=re.MULTILINE)
    found: list[Section] = []
    for part in parts:
        title, _, body = part.partition("\n")
        title, stamp = title.strip(), _STAMP.search(body)
        if stamp is None:
            found.append(Section(title, None, False, ()))
            continue
        found.append(Section(title, stamp.group(1), bool(stamp.group(2)), _changed(stamp.group(1), title, root)))
    return found


def notice(report: str, titles: tuple[str, ...], root: Path = ROOT) -> str:
    """A paragraph naming which of the sections titled ``titles`` (kept from an earlier
    measurement) are stale, or "" when none is."""
    stale = [s for s in sections(report, root) if s.title in titles and s.stale]
    if not stale:
        return ""
    listed = "; ".join(s.describe() for s in stale)
    return f"**Stale sections** (kept from an earlier measurement, remade by their own commands): {listed}."


_NOTICE = re.compile(r"^\*\*Stale sections\*\*[^\n]*\n\n", re.MULTILINE)
_SUMMARY = "\n## Summary against the targets"


def with_notice(report: str, titles: tuple[str, ...], root: Path = ROOT) -> str:
    """``report`` with its paragraph on stale sections (``notice``, ahead of the summary) as
    the sections titled ``titles`` stand now: made again, or taken out where none is stale
    (a section remade by its own command after the full run leaves the old one wrong)."""
    report = _NOTICE.sub("", report)
    said = notice(report, titles, root)
    return report.replace(_SUMMARY, f"\n{said}\n{_SUMMARY}", 1) if said else report
