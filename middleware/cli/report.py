"""``middleware report``: a token usage log summarized, led by the saving in effective cost."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import click

from ..core.text import printable, printable_json, quoted
from .console import Column, fitted_table, literal, new_console

__all__ = ["report"]

# One line per row at 80 columns (the scope, the name cut to fit, the savings); 120 columns
# or more add the cache reads, the costs and, as far as they fit, the prompt sizes.
COLUMNS = [Column("scope", "scope", left=True), Column("name", "name", share=1, width=12), Column("calls", "calls"),
           Column("tokens sent", "sent", width=8), Column("cached", "cached", wide_only=True),
           Column("full history", "full", width=8), Column("cached ", "cached ", wide_only=True),
           Column("saved %", "saved %"), Column("saved % with caching", "w/ cache %"),
           Column("prompt cost $", "cost $ w/ cache", wide_only=True, width=9), Column("cost $", "cost $", wide_only=True, width=9),
           Column("p50", "p50", wide_only=True), Column("p95", "p95", wide_only=True)]  # fmt: skip


@click.command()
@click.argument("log", type=click.Path(exists=True, dir_okay=False))
@click.option("--session", help="Only this session.")
@click.option("--since", help="Only calls since a time: 2026-11-21, 2026-11-21T18:00Z, or 30m, 2h, 7d ago.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option("--html", "html_path", type=click.Path(dir_okay=False), help="Also write a self-contained HTML page with a chart.")
def report(log: str, session: str | None, since: str | None, fmt: str, html_path: str | None) -> None:
    """Summarize a token usage log, led by the saving in effective cost (prompt caching
    modelled on both sides, tool schemas included), with raw and billed tokens beside it:
    totals, per session and per model (calls, tokens sent, full-history tokens, saved,
    cost, cost saved, p50/p95 prompt tokens). Lines that are not usage records are
    counted and skipped."""
    from ..usage.report import build_report, load_report, render_csv, render_html, render_json

    try:
        moment = _parse_since(since)
    except (ValueError, OverflowError) as exc:  # the value quoted as other options' are: at most 100 characters
        problem = "goes back beyond year 1" if isinstance(exc, OverflowError) else "is not a date, a time or a duration"
        raise click.BadParameter(f"{quoted(since, 100)} {problem}; expected one like 2026-11-21, 2026-11-21T18:00Z, "
                                 "30m, 2h or 7d.", param_hint="--since") from None  # fmt: skip
    result = load_report(log, since=moment)
    if session is not None:
        if session not in result.sessions:
            latest = ", ".join(repr(name[:60]) for name in list(result.sessions)[-3:]) or "none"
            when = " since then" if moment else ""
            raise click.ClickException(f"No calls of session {session[:100]!r} in {log}{when}: it holds "
                                       f"{len(result.sessions)} session(s), the latest {latest}.")  # fmt: skip
        result = build_report(result.records, bad_lines=result.bad_lines, session=session)
    if fmt == "json":
        click.echo(printable_json(render_json(result)))
    elif fmt == "csv":
        click.echo(printable(render_csv(result), keep="\r\n"), nl=False)  # a log's names, control characters escaped
    else:
        _print_report(result)
    if html_path:
        Path(html_path).write_text(render_html(result, title=f"Token usage · {Path(log).name}"), encoding="utf-8")
        click.echo(f"wrote {html_path}", err=fmt != "table")


def _parse_since(since: str | None) -> datetime | None:
    from ..usage.report import parse_since

    return parse_since(since) if since else None


def _print_report(result: Any) -> None:
    from rich.text import Text

    from ..usage.report import report_rows

    console = new_console()
    rows: list[dict[str, str | Text]] = []
    for scope, name, row in report_rows(result):
        priced = row["calls_without_price"] < row["calls"]  # no price known at all: say so, not $0
        cost = f"{row['cost_usd']:.6f}" if priced else "n/a"
        effective = row["saved_effective_pct"]
        rows.append({
            "scope": scope,
            "name": literal(name),
            "calls": f"{row['calls']:,}",
            "tokens sent": f"{row['tokens_sent']:,}",
            "cached": f"{row['cached_tokens_sent']:,}",
            "full history": f"{row['full_history_tokens']:,}",
            "cached ": f"{row['cached_tokens_full_history']:,}",
            "saved %": f"{row['saved_pct']:.1f}",
            "saved % with caching": f"{effective:.1f}" if effective is not None else "n/a",
            "prompt cost $": f"{row['effective_cost_usd']:.6f}" if effective is not None else "n/a",
            "cost $": cost,
            "p50": f"{row['p50_prompt_tokens']:,.0f}",
            "p95": f"{row['p95_prompt_tokens']:,.0f}",
        })  # fmt: skip
    console.print(f"[bold]{result.total.headline()}[/bold]")
    console.print(fitted_table(console, "Token usage", COLUMNS, rows))
    if result.bad_lines:
        console.print(f"{result.bad_lines} line(s) were not usage records and were skipped.")
