"""MkDocs hooks: the parts of the site generated from the code and the benchmarks, so they
cannot drift from them.

- ``<!-- cli-help -->`` becomes the ``--help`` text of every command and subcommand of
  ``middleware.cli:main``, as click prints it at 80 columns.
- ``<!-- benchmarks -->`` becomes BENCHMARKS.md (written by ``python -m benchmarks``), with
  its links into docs/ made relative to the page.

Loaded by mkdocs.yml (``hooks: [docs/hooks.py]``).
"""

from __future__ import annotations

import posixpath
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

ROOT = Path(__file__).resolve().parent.parent
CLI_MARKER = "<!-- cli-help -->"
BENCHMARKS_MARKER = "<!-- benchmarks -->"
HELP_WIDTH = 80

# The site documents the code beside it, whichever copy of the package is installed.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def command_help(
    command: click.Command, path: tuple[str, ...], parent: click.Context | None = None
) -> Iterator[tuple[tuple[str, ...], str]]:
    """(command path, its --help text) for ``command`` and each of its subcommands, depth first."""
    ctx = command.make_context(path[-1], [], parent=parent, resilient_parsing=True, terminal_width=HELP_WIDTH)
    yield path, command.get_help(ctx)
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from command_help(sub, (*path, name), ctx)


def cli_reference() -> str:
    """Markdown: one section per command, headed by its command line, holding its --help."""
    from middleware.cli import main

    sections = []
    for path, text in command_help(main, ("middleware",)):
        level = "#" * min(len(path) + 2, 6)  # under the page's own h2
        sections.append(f"{level} `{' '.join(path)}`\n\n```text\n{text.rstrip()}\n```\n")
    return "\n".join(sections)


def benchmarks(page_path: str) -> str:
    """BENCHMARKS.md without its title (the page has one), its docs/ links relative to the page."""
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    text = re.sub(r"\A# [^\n]*\n+", "", text)
    base = posixpath.dirname(page_path)

    def relative(match: re.Match[str]) -> str:
        return f"]({posixpath.relpath(match.group(1), base or '.')})"

    return re.sub(r"\]\(docs/([^)\s]+)\)", relative, text)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace the markers with what they stand for."""
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    if BENCHMARKS_MARKER in markdown:
        markdown = markdown.replace(BENCHMARKS_MARKER, benchmarks(page.file.src_uri))
    return markdown


def on_serve(server: Any, config: Any, builder: Any) -> Any:
    """`mkdocs serve` rebuilds when the generated parts' sources change."""
    for source in ("BENCHMARKS.md", "config.yaml", "middleware/cli"):
        server.watch(str(ROOT / source))
    return server
