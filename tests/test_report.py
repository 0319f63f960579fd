"""Tests for middleware.report: reading usage logs and rendering them."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta, timezone

import pytest

from middleware.report import build_report, parse_since, read_log, render_csv, render_html, render_json

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
