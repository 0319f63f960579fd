"""Which sections of BENCHMARKS.md are stale: benchmarks/stamps.py on a throwaway git repository."""

from __future__ import annotations

import subprocess
import tokenize
from pathlib import Path

from benchmarks.stamps import _python_tokens, notice, sections, with_notice


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def _commit(root: Path, path: str, text: str) -> str:
    file = root / path
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(text)
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", f"change {path}")
    return _git(root, "rev-parse", "--short", "HEAD")


def test_a_section_is_stale_only_when_its_code_changed_since_its_commit(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    first = _commit(tmp_path, "middleware/core.py", "a = 1\n")
    report = (
        "# Benchmarks\n\n"
        f"## 5. Recall\n\n`python -m benchmarks.recall` at commit {first} (also part of the full run).\n\n"
        f"## 8. The endpoint under load\n\nMeasured at commit {first}+changes with `python -m benchmarks load`.\n\n"
        "## Attacks on the endpoint\n\nNo stamp here.\n"
    )
    found = {s.title: s for s in sections(report, tmp_path)}
    assert not found["5. Recall"].stale and found["8. The endpoint under load"].dirty
    assert found["Attacks on the endpoint"].stale and "says no commit" in found["Attacks on the endpoint"].describe()

    _commit(tmp_path, "benchmarks/load.py", "rounds = 3\n")  # only section 8's own module
    found = {s.title: s for s in sections(report, tmp_path)}
    assert not found["5. Recall"].stale
    assert found["8. The endpoint under load"].changed == ("benchmarks/load.py",)

    _commit(tmp_path, "middleware/core.py", "a = 2\n")  # the product: every section
    found = {s.title: s for s in sections(report, tmp_path)}
    assert found["5. Recall"].changed == ("middleware/core.py",)
    said = notice(report, ("8. The endpoint under load",), tmp_path)
    assert "8. The endpoint under load" in said and "benchmarks/load.py" in said and "5. Recall" not in said


def test_a_commit_the_clone_does_not_hold_is_stale(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    _commit(tmp_path, "middleware/core.py", "a = 1\n")
    (part,) = sections("## 2. Overhead\n\nat commit deadbee\n", tmp_path)
    assert part.stale and "does not hold" in part.describe()
    assert notice("## 2. Overhead\n\nat commit deadbee\n", ("1. Other",), tmp_path) == ""


def test_a_change_only_to_comments_or_line_breaks_leaves_a_section_current(tmp_path: Path) -> None:
    """Comments and line breaks of Python and Lua files change no figure; a docstring may (a
    tool's description is one), and so may any token of code or any other file."""
    _git(tmp_path, "init", "-q")
    _commit(tmp_path, "middleware/core.py", 'def f():\n    """Doc."""\n    return (1, 2)  # a pair\n')
    first = _commit(tmp_path, "middleware/record.lua", 'local a = "x -- y" -- first\nreturn a\n')
    report = f"## 2. Overhead\n\nat commit {first}\n"

    def changed() -> tuple[str, ...]:
        (part,) = sections(report, tmp_path)
        return part.changed

    _commit(
        tmp_path,
        "middleware/core.py",
        'def f():\n    """Doc."""\n    # why a pair\n    return (\n        1,\n        2\n    )\n',
    )
    _commit(tmp_path, "middleware/record.lua", '--[[ a block\nof comment ]]\nlocal a = "x -- y"\nreturn a -- second\n')
    assert changed() == ()
    _commit(tmp_path, "middleware/record.lua", '--#include order.lua\nlocal a = "x -- y"\nreturn a\n')  # an include: code
    assert changed() == ("middleware/record.lua",)
    _commit(tmp_path, "middleware/record.lua", 'local a = "x -- z"\nreturn a\n')  # inside a string: code
    assert changed() == ("middleware/record.lua",)
    _commit(tmp_path, "middleware/record.lua", 'local a = "x -- y"\nreturn a\n')
    _commit(tmp_path, "middleware/core.py", 'def f():\n    """Other doc."""\n    return (1, 2)\n')
    assert changed() == ("middleware/core.py",)
    _commit(tmp_path, "middleware/core.py", 'def f():\n    """Doc."""\n    return (1, 2)\n')
    _commit(tmp_path, "pyproject.toml", "# only a comment\n")  # not Python or Lua: changed
    assert changed() == ("pyproject.toml",)


def test_the_reports_note_on_stale_sections_follows_a_section_remade_on_its_own(tmp_path: Path) -> None:
    """The note ahead of the summary names the kept sections that are stale now: an old note
    goes when the section it named was remade, and comes back when the code changes again."""
    _git(tmp_path, "init", "-q")
    old = _commit(tmp_path, "middleware/core.py", "a = 1\n")
    new = _commit(tmp_path, "middleware/core.py", "a = 2\n")
    kept = ("8. The endpoint under load",)
    report = (f"# Benchmarks\n\n**Stale sections** (kept ...): 8. The endpoint under load: at commit {old}.\n\n"
              f"## Summary against the targets\n\nat commit {new}\n\n## 8. The endpoint under load\n\nat commit {new}\n")  # fmt: skip
    current = with_notice(report, kept, tmp_path)
    assert "Stale sections" not in current and current.count("## Summary against the targets") == 1
    _commit(tmp_path, "middleware/core.py", "a = 3\n")
    stale = with_notice(current, kept, tmp_path)
    assert stale.index("**Stale sections**") < stale.index("## Summary") and stale.count("**Stale sections**") == 1
    assert with_notice(stale, kept, tmp_path) == stale


def test_an_f_string_compares_as_its_source_on_every_python() -> None:
    """Python 3.12+ tokenizes an f-string in parts and drops the spaces in its braces;
    ``f"{x = }"`` prints differently from ``f"{x=}"``, so the two must not compare equal."""
    assert _python_tokens('print(f"{x = }")\n') != _python_tokens('print(f"{x=}")\n')
    nested = "y = f\"a{f'{b}'!r}c\""
    assert _python_tokens(nested + "  # a comment\n") == _python_tokens(nested + "\n")
    assert _python_tokens(nested + "\n") != _python_tokens(nested.replace("!r", "!s") + "\n")
    assert _python_tokens('y = f"""a\n{b}\n"""\n') != _python_tokens('y = f"""a\n{b }\n"""\n')
    # A form feed or U+2028 before it does not shift the rows read (str.splitlines splits there).
    assert _python_tokens('x = 1\n\x0c\ny = f"{a}"  # \u2028\nz = f"{c}"\n') != _python_tokens(
        'x = 1\n\x0c\ny = f"{b}"  # \u2028\nz = f"{c}"\n'
    )
    assert ("STRING", 'f"""a\n{b}\n"""') in [(tokenize.tok_name[t], s) for t, s in _python_tokens('y = f"""a\n{b}\n"""\n')]
