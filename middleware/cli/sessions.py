"""``middleware sessions``: list, show and reset sessions in the configured store."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from typing import Any

import click

from ..core.text import printable_json, quoted
from .console import CliContext, errors, joined, literal, new_console, store_options, warn_if_private_store

__all__ = ["print_state", "sessions"]


@click.group()
def sessions() -> None:
    """List, show and reset sessions in the configured store."""


@sessions.command("list")
@store_options
@click.option("--search", help="Only sessions whose id contains this text.")
@click.option("--page", default=1, show_default=True, type=click.IntRange(min=1), help="Page number (from 1).")
@click.option("--page-size", default=20, show_default=True, type=click.IntRange(1, 200), help="Sessions per page (1-200).")
@click.pass_obj
def sessions_list(obj: CliContext, search: str | None, page: int, page_size: int) -> None:
    """Sessions, most recently updated first."""
    from rich.table import Table

    mgr = obj.manager()
    warn_if_private_store(mgr)
    with errors(), mgr:
        result = mgr.list_sessions(search=search, page=page, page_size=page_size)
    table = Table(title=f"sessions · page {result.page}/{result.total_pages} · {result.total} in all", title_justify="left")
    for column in ["session", "updated", "turns", "context keys", "summary lines", "recent", "full-history tokens"]:
        table.add_column(column, justify="left" if column in {"session", "updated"} else "right")
    for entry in result.entries:
        updated = datetime.fromtimestamp(entry.updated_at, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        table.add_row(
            literal(entry.session_id),
            updated,
            str(entry.turns),
            str(entry.context_keys),
            str(entry.summary_lines),
            str(entry.recent_messages),
            f"{entry.full_tokens:,}",
        )
    new_console().print(table)


@sessions.command("show")
@store_options
@click.argument("session_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a readable view.")
@click.pass_obj
def sessions_show(obj: CliContext, session_id: str, as_json: bool) -> None:
    """What one session remembers: context keys, summary, recent messages, counters."""
    from dataclasses import asdict

    mgr = obj.manager()
    warn_if_private_store(mgr)
    with errors(), mgr:
        state = mgr.get_state(session_id)
    if state.is_empty:
        raise click.ClickException(f"no session {quoted(session_id, 100)} in this store; expected a session id as "
                                   "`middleware sessions list` lists them.")  # fmt: skip
    if as_json:
        data = {k: v for k, v in asdict(state).items() if k != "pairs"}
        click.echo(printable_json(json.dumps(data, indent=2, ensure_ascii=False)))
        return
    print_state(new_console(), session_id, state)


def print_state(console: Any, session_id: str, state: Any) -> None:
    owner = ("", " · user ", literal(state.owner[0]), " · agent ", literal(state.owner[1])) if state.owner else ("",)
    console.print(joined(literal(session_id, "bold"), f" · {state.turns} turn(s) · its messages with tool details: "
                          f"{state.full_tokens:,} tokens", *owner))  # fmt: skip
    for title, lines in (
        ("context", [f"{k}: {v}" for k, v in state.context.items()]),
        *([("set earlier", [f"{k}={v}" for k, v in state.earlier.items()])] if state.earlier else []),
        ("summary", state.summary),
        ("recent", [f"{m['role']}: {m['content']}" for m in state.recent]),
        ("notes", state.notes.splitlines()),
    ):
        console.print(f"[bold]{title}[/bold]" + ("" if lines else " (none)"))
        for line in lines:
            console.print(joined("  ", literal(line, lines=True)))


@sessions.command("reset")
@store_options
@click.argument("session_id")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
def sessions_reset(obj: CliContext, session_id: str, yes: bool) -> None:
    """Forget a session entirely (asks first; --yes to skip, required when input is not a terminal)."""
    if not yes:
        if not sys.stdin.isatty():
            raise click.UsageError("not resetting without --yes: input is not a terminal to confirm on")
        click.confirm(f"Forget session {session_id!r}?", abort=True)
    mgr = obj.manager()
    warn_if_private_store(mgr)
    with errors(), mgr:
        existed = not mgr.get_state(session_id).is_empty
        mgr.reset(session_id)
    click.echo(f"session {session_id!r} reset" if existed else f"no session {session_id!r}: nothing to reset")
