"""The README is a short front door: install and a quickstart on its first screen, the test
command CI runs, links into the documentation that resolve, and no figure typed by hand.
Its ```python blocks run with the documentation's, in tests/test_docs.py."""

from __future__ import annotations

import re

from tests.conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")
LINES = README.splitlines()


def prose(text: str) -> str:
    """``text`` without its fenced blocks."""
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def test_readme_is_short_with_install_and_a_quickstart_first() -> None:
    """At most 200 lines; the install commands and a ```python quickstart of under ten lines
    within the first 40 lines (a first screen)."""
    assert len(LINES) <= 200
    first_screen = "\n".join(LINES[:40])
    assert 'pip install -e ".[dev]"' in first_screen
    quickstart = re.search(r"```python\n(.*?)```", first_screen, re.S)
    assert quickstart and len(quickstart[1].strip().splitlines()) < 10


def test_readme_lines_fit_a_terminal() -> None:
    """No line over 120 characters, except table rows and lines holding a URL."""
    long = [line for line in LINES if len(line) > 120 and not line.startswith("|") and "://" not in line]
    assert long == []


def test_readme_test_command_is_what_ci_runs() -> None:
    """.ci/run runs the README's test command."""
    command = re.search(r"## Run the tests\n\n```bash\n(.+?)\n```", README).group(1)  # type: ignore[union-attr]
    assert command in (REPO / ".ci" / "run").read_text()


def test_readme_shows_the_two_setup_commands() -> None:
    """Install, then the demo, as a new user runs them (CI runs the demo too)."""
    assert re.search(r"```bash\n.*\npip install -e \"\.\[dev\]\"\n```", README)
    assert "```bash\nmiddleware demo\n```" in README
    assert "middleware demo" in (REPO / ".ci" / "run").read_text()


def test_readme_links_resolve() -> None:
    """Every relative link (to the docs, BENCHMARKS.md, a picture) names a file of the
    repository, and its anchor a heading of that page."""
    links = re.findall(r"\]\(([^)\s]+)\)", README)
    relative = [link for link in links if "://" not in link]
    assert len(relative) > 10
    for link in relative:
        path, _, anchor = link.partition("#")
        target = REPO / path
        assert target.is_file(), link
        if anchor:
            headings = re.findall(r"^#+ (.+)$", target.read_text(encoding="utf-8"), re.M)
            slugs = {re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", heading.lower()).strip()) for heading in headings}
            assert anchor in slugs, link


def test_readme_types_no_benchmark_figure() -> None:
    """Figures live in generated BENCHMARKS.md (and the tested docs): the README's prose has no
    percentage or token count of its own."""
    assert re.findall(r"\d+(?:\.\d+)?\s?%|\b\d[\d,]* tokens\b", prose(README)) == []
