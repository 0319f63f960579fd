"""Reading token usage logs: totals, per session and per model, and an HTML page.

Parsing and aggregation are pure functions over lines; rendering to a table,
JSON, CSV or a self-contained HTML page (with an SVG chart of tokens per turn,
sent against the full history, each split into what a provider would read from its
prompt cache and what it bills in full) sits on top. The headline saving is the
effective prompt cost with caching on both sides, tool schemas included (lines written
before the ``cache`` field existed count toward raw tokens only).
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

__all__ = ["Report", "Totals", "build_report", "parse_since", "read_log", "render_csv", "render_html", "render_json"]

_RELATIVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(value: str, *, now: datetime | None = None) -> datetime:
    """``2026-11-21``, ``2026-11-21T18:00:00Z`` or a relative ``30m``, ``2h``, ``7d``."""
    now = now or datetime.now(timezone.utc)
    match = _RELATIVE.match(value)
    if match:
        return now - timedelta(**{_UNITS[match.group(2)]: float(match.group(1))})
    try:
        return _parse_time(value.strip())
    except ValueError:
        raise ValueError(f"--since {value!r} is not a date, a time or a duration like 30m, 2h, 7d") from None


def _parse_time(text: str) -> datetime:
    """An ISO 8601 time; one without a zone is taken as UTC."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _valid(record: Any) -> bool:
    tokens = record.get("tokens") if isinstance(record, dict) else None
    return (
        isinstance(tokens, dict)
        and isinstance(tokens.get("total"), int)
        and isinstance(record.get("full_history_tokens"), int)
        and isinstance(record.get("session"), str)
        and isinstance(record.get("time"), str)
    )


def read_log(lines: Iterable[str]) -> tuple[list[dict[str, Any]], int]:
    """Usage records and the count of lines that were not usage records."""
    records, bad = [], 0
    for line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if _valid(record):
            records.append(record)
        else:
            bad += 1
    return records, bad


def _percentile(values: Sequence[int], q: float) -> float:
    """Nearest-rank percentile; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return float(ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)])


def _cache(record: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]] | None:
    """The sent and full-history sides of a line's ``cache`` field, when it has one."""
    cache = record.get("cache")
    if not isinstance(cache, Mapping):
        return None
    sent, full = cache.get("sent"), cache.get("full_history")
    return (sent, full) if isinstance(sent, Mapping) and isinstance(full, Mapping) else None


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


@dataclass
class Totals:
    calls: int = 0
    turns: int = 0
    tokens_sent: int = 0
    full_history_tokens: int = 0
    cost_usd: float = 0.0
    cost_saved_usd: float = 0.0
    cost_unknown: int = 0
    # Prompt caching (lines with a cache field): tokens read from the provider's cache on
    # each side, and the effective prompt cost of each side (priced lines only).
    cached_sent: int = 0
    cached_full: int = 0
    effective_cost_usd: float = 0.0
    full_effective_cost_usd: float = 0.0
    effective_priced: int = 0
    prompt_tokens: list[int] = field(default_factory=list, repr=False)

    def add(self, record: Mapping[str, Any]) -> None:
        self.calls += 1
        self.turns += 1 if record.get("step", 0) == 0 else 0
        self.tokens_sent += record["tokens"]["total"]
        self.full_history_tokens += record["full_history_tokens"]
        self.prompt_tokens.append(record["tokens"]["total"])
        if record.get("cost_usd") is None:
            self.cost_unknown += 1
        else:
            self.cost_usd += record["cost_usd"]
        self.cost_saved_usd += record.get("cost_saved_usd") or 0.0
        sides = _cache(record)
        if sides is not None:
            sent, full = sides
            self.cached_sent += int(_number(sent.get("read")))
            self.cached_full += int(_number(full.get("read")))
            if sent.get("cost_usd") is not None and full.get("cost_usd") is not None:
                self.effective_priced += 1
                self.effective_cost_usd += _number(sent["cost_usd"])
                self.full_effective_cost_usd += _number(full["cost_usd"])

    @property
    def saved_tokens(self) -> int:
        return self.full_history_tokens - self.tokens_sent

    @property
    def saved_pct(self) -> float:
        return 100 * self.saved_tokens / self.full_history_tokens if self.full_history_tokens else 0.0

    @property
    def saved_effective_pct(self) -> float | None:
        """The saving in effective prompt cost, caching modelled on both sides (None: no priced line)."""
        if not self.effective_priced or not self.full_effective_cost_usd:
            return None
        return 100 * (1 - self.effective_cost_usd / self.full_effective_cost_usd)

    def row(self) -> dict[str, Any]:
        effective = self.saved_effective_pct
        return {
            "calls": self.calls,
            "turns": self.turns,
            "tokens_sent": self.tokens_sent,
            "full_history_tokens": self.full_history_tokens,
            "saved_tokens": self.saved_tokens,
            "saved_pct": round(self.saved_pct, 1),
            "cached_tokens_sent": self.cached_sent,
            "cached_tokens_full_history": self.cached_full,
            "effective_cost_usd": round(self.effective_cost_usd, 6),
            "full_history_effective_cost_usd": round(self.full_effective_cost_usd, 6),
            "saved_effective_pct": round(effective, 1) if effective is not None else None,
            "cost_usd": round(self.cost_usd, 6),
            "cost_saved_usd": round(self.cost_saved_usd, 6),
            "calls_without_price": self.cost_unknown,
            "p50_prompt_tokens": _percentile(self.prompt_tokens, 50),
            "p95_prompt_tokens": _percentile(self.prompt_tokens, 95),
        }

    def headline(self) -> str:
        """One sentence: the effective saving with caching, and raw tokens beside it."""
        raw = f"raw prompt tokens {self.tokens_sent:,} against {self.full_history_tokens:,} ({self.saved_pct:.1f}% saved)"
        effective = self.saved_effective_pct
        if effective is None:
            return f"Saved: {raw}; no line carries a priced cache figure."
        return (
            f"Saved {effective:.1f}% in effective prompt cost with prompt caching on both sides, tool schemas included "
            f"(${self.effective_cost_usd:.4f} against ${self.full_effective_cost_usd:.4f} for the full history); {raw}."
        )


@dataclass
class Report:
    total: Totals
    sessions: dict[str, Totals]
    models: dict[str, Totals]
    records: list[dict[str, Any]]
    bad_lines: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "total": self.total.row(),
            "sessions": {k: v.row() for k, v in self.sessions.items()},
            "models": {k: v.row() for k, v in self.models.items()},
            "bad_lines": self.bad_lines,
        }

    def per_turn(self) -> list[tuple[int, float, float]]:
        """(turn, mean tokens sent, mean full-history tokens) over the turns' first calls."""
        return [(turn, sent, full) for turn, sent, full, _, _ in self.per_turn_cached()]

    def per_turn_cached(self) -> list[tuple[int, float, float, float, float]]:
        """(turn, sent, full history, sent read from cache, full history read from cache),
        means over the turns' first calls."""
        by_turn: dict[int, list[tuple[float, float, float, float]]] = {}
        for record in self.records:
            if record.get("step", 0) == 0 and isinstance(record.get("turn"), int):
                sides = _cache(record)
                cached = (_number(sides[0].get("read")), _number(sides[1].get("read"))) if sides else (0.0, 0.0)
                by_turn.setdefault(record["turn"], []).append((record["tokens"]["total"], record["full_history_tokens"], *cached))
        out = []
        for turn, rows in sorted(by_turn.items()):
            sent, full, sent_cached, full_cached = (sum(column) / len(rows) for column in zip(*rows, strict=True))
            out.append((turn, sent, full, sent_cached, full_cached))
        return out


def build_report(
    records: Iterable[Mapping[str, Any]], *, bad_lines: int = 0, session: str | None = None, since: datetime | None = None
) -> Report:
    total, kept = Totals(), []
    sessions: dict[str, Totals] = {}
    models: dict[str, Totals] = {}
    for record in records:
        if session is not None and record["session"] != session:
            continue
        if since is not None:
            try:
                moment = _parse_time(record["time"])
            except ValueError:
                continue
            if moment < since:
                continue
        kept.append(dict(record))
        total.add(record)
        # The endpoint's tenants may each have a session of one id: "<tenant>/<session>" apart.
        tenant = record.get("tenant")
        name = f"{tenant}/{record['session']}" if isinstance(tenant, str) else record["session"]
        sessions.setdefault(name, Totals()).add(record)
        models.setdefault(str(record.get("model")), Totals()).add(record)
    return Report(total=total, sessions=sessions, models=models, records=kept, bad_lines=bad_lines)


def load_report(path: str | Path, **filters: Any) -> Report:
    with Path(path).open(encoding="utf-8", errors="replace") as handle:
        records, bad = read_log(handle)
    return build_report(records, bad_lines=bad, **filters)


def render_json(report: Report) -> str:
    return json.dumps(report.as_dict(), indent=2)


def render_csv(report: Report) -> str:
    out = io.StringIO()
    columns = ["scope", "name", *Totals().row().keys()]
    writer = csv.DictWriter(out, fieldnames=columns)
    writer.writeheader()
    for scope, name, row in report_rows(report):
        writer.writerow({"scope": scope, "name": name, **row})
    return out.getvalue()


# --- HTML --------------------------------------------------------------------


def _chart_svg(points: Sequence[tuple[int, float, float, float, float]], width: int = 760, height: int = 320) -> str:
    """A line chart of tokens per turn: sent (filled) against the full history, each with the
    part a provider would read from its cache shaded beneath it."""
    if not points:
        return '<p class="empty">No turns in this log.</p>'
    left, right, top, bottom = 64, 20, 20, 44
    plot_w, plot_h = width - left - right, height - top - bottom
    top_value = max(max(f for _, _, f, _, _ in points), 1)
    step = int(10 ** max(0, len(str(int(top_value))) - 1))
    ceiling = math.ceil(top_value / step) * step
    first, last = points[0][0], points[-1][0]
    span = max(last - first, 1)

    def x(turn: float) -> float:
        return left + (turn - first) / span * plot_w

    def y(value: float) -> float:
        return top + plot_h - value / ceiling * plot_h

    def line(column: int) -> str:
        return " ".join(f"{x(p[0]):.1f},{y(p[column]):.1f}" for p in points)

    def area(column: int) -> str:
        return f"{x(first):.1f},{y(0):.1f} {line(column)} {x(last):.1f},{y(0):.1f}"

    grid = []
    for i in range(5):
        value = ceiling * i / 4
        grid.append(
            f'<line x1="{left}" x2="{width - right}" y1="{y(value):.1f}" y2="{y(value):.1f}" class="grid"/>'
            f'<text x="{left - 8}" y="{y(value) + 4:.1f}" class="tick" text-anchor="end">{int(value):,}</text>'
        )
    ticks = sorted({first, last, *(p[0] for p in points[:: max(1, len(points) // 10)])})
    xlabels = "".join(
        f'<text x="{x(t):.1f}" y="{height - bottom + 18}" class="tick" text-anchor="middle">{t}</text>' for t in ticks
    )
    dots = "".join(
        f'<circle cx="{x(t):.1f}" cy="{y(s):.1f}" r="3" class="sent-dot"><title>turn {t}: {s:,.0f} sent ({sc:,.0f} cached), '
        f"{f:,.0f} full ({fc:,.0f} cached)</title></circle>"
        for t, s, f, sc, fc in points
    )
    return f"""<svg viewBox="0 0 {width} {height}" role="img" aria-label="Prompt tokens per turn">
{"".join(grid)}
<polygon points="{area(4)}" class="full-cached"/>
<polygon points="{area(1)}" class="sent-area"/>
<polygon points="{area(3)}" class="sent-cached"/>
<polyline points="{line(2)}" class="full"/>
<polyline points="{line(1)}" class="sent"/>
{dots}{xlabels}
<text x="{left + plot_w / 2}" y="{height - 6}" class="axis" text-anchor="middle">turn</text>
<text x="14" y="{top + plot_h / 2}" class="axis" text-anchor="middle" transform="rotate(-90 14 {top + plot_h / 2})">prompt tokens</text>
</svg>"""


_STYLE = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:32px auto;max-width:860px;color:#1d2330;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}.sub{color:#5b6475;margin:0 0 20px}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(140px,1fr));gap:12px;margin:0 0 20px}.card{background:#f4f6fa;border-radius:10px;padding:12px 14px}
.card b{display:block;font-size:22px}.card span{color:#5b6475;font-size:13px}
svg{width:100%;height:auto;background:#fff;border:1px solid #e3e7ee;border-radius:10px}
.grid{stroke:#eef1f5}.tick{font-size:11px;fill:#6b7385}.axis{font-size:12px;fill:#3b4252}
.full{fill:none;stroke:#d1495b;stroke-width:2.5;stroke-dasharray:6 4}.sent{fill:none;stroke:#2f6fdf;stroke-width:2.5}
.sent-area{fill:#2f6fdf22}.sent-dot{fill:#2f6fdf}.sent-cached{fill:#2f6fdf55}.full-cached{fill:#d1495b22}
.legend{display:flex;flex-wrap:wrap;gap:8px 18px;font-size:13px;color:#3b4252;margin:8px 0 24px}.legend i{display:inline-block;width:22px;height:3px;vertical-align:middle;margin-right:6px}
table{border-collapse:collapse;width:100%;font-size:13px;margin:0 0 24px}th,td{text-align:right;padding:6px 8px;border-bottom:1px solid #e9ecf2}
th:first-child,td:first-child{text-align:left}th{color:#5b6475;font-weight:600}
"""


def _pct(value: float | None) -> str:
    return f"{value:.1f}%" if value is not None else "n/a"


def _table(title: str, rows: Mapping[str, Totals]) -> str:
    body = "".join(
        f"<tr><td>{html.escape(name)}</td><td>{t.calls}</td><td>{t.tokens_sent:,}</td><td>{t.cached_sent:,}</td>"
        f"<td>{t.full_history_tokens:,}</td><td>{t.cached_full:,}</td><td>{t.saved_pct:.1f}%</td>"
        f"<td>{_pct(t.saved_effective_pct)}</td><td>${t.effective_cost_usd:.4f}</td><td>${t.full_effective_cost_usd:.4f}</td>"
        f"<td>{_percentile(t.prompt_tokens, 50):,.0f}</td><td>{_percentile(t.prompt_tokens, 95):,.0f}</td></tr>"
        for name, t in rows.items()
    )
    return (
        f"<h2>{html.escape(title)}</h2><table><tr><th>name</th><th>calls</th><th>tokens sent</th><th>of it cached</th>"
        f"<th>full history</th><th>of it cached</th><th>saved, raw</th><th>saved, with caching</th><th>prompt cost</th>"
        f"<th>full history cost</th><th>p50</th><th>p95</th></tr>{body}</table>"
    )


def render_html(report: Report, *, title: str = "Token usage") -> str:
    """One self-contained page (inline CSS and SVG, no scripts or external files)."""
    t = report.total
    cards = [
        (_pct(t.saved_effective_pct), "saved in effective cost, prompt caching on both sides"),
        (f"{t.saved_pct:.1f}%", "saved in raw prompt tokens"),
        (f"{t.tokens_sent:,}", f"prompt tokens sent ({t.cached_sent:,} from cache)"),
        (f"{t.full_history_tokens:,}", f"with the full history ({t.cached_full:,} from cache)"),
        (f"{t.calls:,}", "LLM calls"),
    ]
    card_html = "".join(f'<div class="card"><b>{v}</b><span>{html.escape(k)}</span></div>' for v, k in cards)
    note = f" · {report.bad_lines} bad line(s) skipped" if report.bad_lines else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title><style>{_STYLE}</style></head>
<body>
<h1>{html.escape(title)}</h1>
<p class="sub">{len(report.sessions)} session(s), {t.turns} turn(s), {len(report.models)} model(s){note}. Tool schemas are counted on both sides.</p>
<div class="cards">{card_html}</div>
<p class="sub">{html.escape(t.headline())}</p>
<h2>Prompt tokens per turn</h2>
{_chart_svg(report.per_turn_cached())}
<div class="legend"><span><i style="background:#2f6fdf"></i>sent with middleware</span><span><i style="background:#2f6fdf55"></i>of which read from the provider's cache</span><span><i style="background:#d1495b"></i>full history with tool details and every schema</span><span><i style="background:#d1495b33"></i>of which read from cache</span></div>
{_table("Per session", report.sessions)}
{_table("Per model", report.models)}
</body></html>
"""


def report_rows(report: Report) -> list[tuple[str, str, dict[str, Any]]]:
    """(scope, name, row) for tables: the total, then sessions, then models."""
    rows = [("total", "", report.total.row())]
    rows += [("session", name, totals.row()) for name, totals in report.sessions.items()]
    rows += [("model", name, totals.row()) for name, totals in report.models.items()]
    return rows
