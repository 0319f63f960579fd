"""``middleware report``: a token usage log summarized, led by the saving in effective cost."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import click

from ..core.text import printable, printable_json
from .console import literal, new_console

__all__ = ["report"]


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
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from None
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
    from rich.table import Table

    from ..usage.report import report_rows

    table = Table(title_justify="left", title="Token usage")
    columns = [
        "scope",
        "name",
        "calls",
        "tokens sent",
        "cached",
        "full history",
        "cached ",
        "saved %",
        "saved % with caching",
        "prompt cost $",
        "cost $",
        "p50",
        "p95",
    ]
    for column in columns:
        table.add_column(column, justify="left" if column in {"scope", "name"} else "right", overflow="fold")
    for scope, name, row in report_rows(result):
        priced = row["calls_without_price"] < row["calls"]  # no price known at all: say so, not $0
        cost = f"{row['cost_usd']:.6f}" if priced else "n/a"
        effective = row["saved_effective_pct"]
        table.add_row(
            scope,
            literal(name),
            f"{row['calls']:,}",
            f"{row['tokens_sent']:,}",
            f"{row['cached_tokens_sent']:,}",
            f"{row['full_history_tokens']:,}",
            f"{row['cached_tokens_full_history']:,}",
            f"{row['saved_pct']:.1f}",
            f"{effective:.1f}" if effective is not None else "n/a",
            f"{row['effective_cost_usd']:.6f}" if effective is not None else "n/a",
            cost,
            f"{row['p50_prompt_tokens']:,.0f}",
            f"{row['p95_prompt_tokens']:,.0f}",
        )
    console = new_console()
    console.print(f"[bold]{result.total.headline()}[/bold]")
    console.print(table)
    if result.bad_lines:
        console.print(f"{result.bad_lines} line(s) were not usage records and were skipped.")
