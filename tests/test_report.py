"""Tests for middleware.report: reading usage logs and rendering them."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta, timezone

import pytest

from middleware.usage.report import build_report, parse_since, read_log, render_csv, render_html, render_json

NOW = datetime(2026, 11, 21, 18, 0, tzinfo=timezone.utc)


def line(
    session: str,
    turn: int,
    sent: int,
    full: int,
    *,
    step: int = 0,
    model: str = "m",
    minutes_ago: int = 0,
    cost: float | None = 0.001,
) -> str:
    return json.dumps(
        {
            "time": (NOW - timedelta(minutes=minutes_ago)).isoformat().replace("+00:00", "Z"),
            "session": session,
            "turn": turn,
            "step": step,
            "model": model,
            "tokens": {"total": sent},
            "full_history_tokens": full,
            "cost_usd": cost,
            "cost_saved_usd": (full - sent) * 1e-6,
        }
    )


LOG = [
    line("a", 1, 100, 100, minutes_ago=90),
    line("a", 2, 120, 300, minutes_ago=60),
    line("a", 2, 150, 330, step=1, minutes_ago=60),
    line("b", 1, 100, 100, model="n", cost=None),
    "not json at all",
    json.dumps({"valid": "json", "but": "not a usage line"}),
    "",
]


def test_bad_lines_are_counted_and_skipped() -> None:
    """Blank lines are ignored; malformed or foreign lines are counted, never fatal."""
    records, bad = read_log(LOG)
    assert len(records) == 4 and bad == 2


def test_totals_per_session_and_per_model() -> None:
    """Sums, savings, cost, unknown prices and nearest-rank percentiles."""
    records, bad = read_log(LOG)
    report = build_report(records, bad_lines=bad)
    total = report.total.row()
    assert (total["calls"], total["turns"], total["tokens_sent"], total["full_history_tokens"]) == (4, 3, 470, 830)
    assert total["saved_tokens"] == 360 and total["saved_pct"] == pytest.approx(43.4, abs=0.05)
    assert total["cost_usd"] == pytest.approx(0.003) and total["calls_without_price"] == 1
    assert (total["p50_prompt_tokens"], total["p95_prompt_tokens"]) == (100, 150)
    assert set(report.sessions) == {"a", "b"} and set(report.models) == {"m", "n"}
    assert report.sessions["a"].row()["calls"] == 3
    assert report.per_turn() == [(1, 100.0, 100.0), (2, 120.0, 300.0)]  # first calls of each turn only


def test_two_tenants_sessions_of_one_id_are_reported_apart() -> None:
    """The endpoint's usage lines name their tenant: two tenants' sessions of one id are two
    rows, "<tenant>/<session>"; --session ID keeps the sessions of that id, whoever's."""
    north, south = (json.loads(line("shared", 1, 100, 100)) | {"tenant": t} for t in ("north", "south"))
    records, _ = read_log([json.dumps(north), json.dumps(south), line("shared", 1, 50, 50)])
    report = build_report(records)
    assert {name: t.row()["calls"] for name, t in report.sessions.items()} == {"north/shared": 1, "south/shared": 1, "shared": 1}
    assert build_report(records, session="shared").total.calls == 3


def test_filters_by_session_and_time() -> None:
    """--session keeps one session; --since drops older calls."""
    records, _ = read_log(LOG)
    assert build_report(records, session="b").total.calls == 1
    assert build_report(records, since=NOW - timedelta(minutes=61)).total.calls == 3


def test_since_reads_times_without_a_zone_as_utc() -> None:
    """A log written by another tool with naive times filters like the library's own."""
    naive = [json.loads(text) for text in LOG[:4]]
    for record in naive:
        record["time"] = record["time"].removesuffix("Z")
    assert build_report(naive, since=NOW - timedelta(minutes=61)).total.calls == 3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30m", NOW - timedelta(minutes=30)),
        ("2h", NOW - timedelta(hours=2)),
        ("7d", NOW - timedelta(days=7)),
        ("2026-11-20", datetime(2026, 11, 20, tzinfo=timezone.utc)),
        ("2026-11-21T17:00:00Z", datetime(2026, 11, 21, 17, tzinfo=timezone.utc)),
    ],
)
def test_since_accepts_dates_and_durations(text: str, expected: datetime) -> None:
    """Absolute times (UTC when unqualified) and relative durations."""
    assert parse_since(text, now=NOW) == expected


def test_since_rejects_nonsense() -> None:
    """An unreadable --since names the value and the accepted forms."""
    with pytest.raises(ValueError, match=r"'yesterday'.*30m"):
        parse_since("yesterday", now=NOW)


def test_json_and_csv_hold_the_same_figures() -> None:
    """The machine-readable formats agree with each other."""
    records, bad = read_log(LOG)
    report = build_report(records, bad_lines=bad)
    data = json.loads(render_json(report))
    rows = list(csv.DictReader(io.StringIO(render_csv(report))))
    assert data["total"]["tokens_sent"] == int(rows[0]["tokens_sent"]) == 470
    assert data["bad_lines"] == 2 and {r["scope"] for r in rows} == {"total", "session", "model"}


def test_html_is_one_self_contained_page_with_a_chart() -> None:
    """No scripts, no external resources; an SVG with both series; names escaped."""
    records, bad = read_log([*LOG, line("<script>x</script>", 1, 10, 10)])
    page = render_html(build_report(records, bad_lines=bad))
    assert "<svg" in page and 'class="sent"' in page and 'class="full"' in page
    assert "<script" not in page.replace("&lt;script&gt;", "")
    assert "http://" not in page and "https://" not in page and "<link" not in page
    assert "&lt;script&gt;x&lt;/script&gt;" in page


def test_empty_log_renders_without_error() -> None:
    """An empty report still renders every format."""
    report = build_report([])
    assert "No turns" in render_html(report)
    assert json.loads(render_json(report))["total"]["calls"] == 0


def cached_line(turn: int, sent: int, full: int, sent_read: int, full_read: int, sent_cost: float, full_cost: float) -> str:
    record = json.loads(line("c", turn, sent, full))
    record["cache"] = {
        "rules": "openai",
        "sent": {"read": sent_read, "written": 0, "uncached": sent - sent_read, "cost_usd": sent_cost},
        "full_history": {"read": full_read, "written": 0, "uncached": full - full_read, "cost_usd": full_cost},
        "saved_usd": full_cost - sent_cost,
        "saved_pct": 0.0,
    }
    return json.dumps(record)


def test_the_headline_is_the_effective_saving_with_caching_on_both_sides() -> None:
    """Lines with a cache field add up to effective costs; the headline puts their saving
    first and raw tokens beside it; lines without one count toward raw tokens only."""
    records, _ = read_log([cached_line(1, 1000, 1000, 0, 0, 0.001, 0.001), cached_line(2, 1000, 3000, 0, 2048, 0.001, 0.002),
                           line("c", 3, 500, 900)])  # fmt: skip
    report = build_report(records)
    row = report.total.row()
    assert (row["cached_tokens_sent"], row["cached_tokens_full_history"]) == (0, 2048)
    assert row["saved_effective_pct"] == pytest.approx(33.3, abs=0.05) and row["saved_pct"] == pytest.approx(49.0, abs=0.05)
    assert report.total.headline().startswith("Saved 33.3% in effective prompt cost with prompt caching on both sides")
    assert "raw prompt tokens 2,500 against 4,900 (49.0% saved)" in report.total.headline()
    assert report.per_turn_cached()[1] == (2, 1000.0, 3000.0, 0.0, 2048.0)
    page = render_html(report)
    assert "33.3%" in page and "saved in effective cost, prompt caching on both sides" in page and 'class="sent-cached"' in page
    assert build_report(read_log([line("x", 1, 1, 2)])[0]).total.saved_effective_pct is None


def test_a_table_leaves_out_the_wide_columns_that_do_not_fit_never_cutting_one_off() -> None:
    """Found: `middleware report` at 120 columns cut its p50/p95 columns off at the edge of
    the terminal. Wide-only columns are now shown as far as they fit, the last left out first."""
    from rich.console import Console

    from middleware.cli.console import fitted_table
    from middleware.cli.report import COLUMNS

    cells = ["session", "demo-20261129-205710", "1,150", "1,275,550", "1,120,960", "1,972,605", "1,829,920", "56.2", "29.8",
             "0.411333", "0.912593", "1,641", "1,882"]  # fmt: skip
    row = {column.key: cell for column, cell in zip(COLUMNS, cells, strict=True)}
    shown = {}
    for width in (80, 120, 200):
        console = Console(width=width, record=True, file=io.StringIO())
        table = fitted_table(console, "Token usage", COLUMNS, [row])
        console.print(table)
        header = console.export_text().splitlines()[2]
        headers = [str(column.header) for column in table.columns]
        assert all(name.strip() in header for name in headers), (width, header)  # none cut off
        shown[width] = " ".join(headers)
    assert shown[80] == "scope name calls sent full saved % w/ cache %"
    assert "cached" in shown[120] and shown[120].endswith("w/ cache %")  # the cache reads fit; the costs do not
    assert shown[200].endswith("cost $ w/ cache cost $ p50 p95")
