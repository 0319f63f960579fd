"""Benchmarks: `python -m benchmarks` runs them all and writes BENCHMARKS.md."""

import os
from pathlib import Path
from typing import Any

# The peers import litellm directly; without this litellm would try to fetch its price
# map from the network on import. Nothing here downloads at run time.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def growth(row: dict[str, Any]) -> float:
    """How much a replay row's mean prompt grows from turn 20 to turn 100 (0.0 without turn 20)."""
    return float(row["turn100"] / row["turn20"] - 1) if row["turn20"] else 0.0


def write_section(report: Path, text: str, start: str, end: str, before: str = "") -> None:
    """Put ``text`` into the file ``report`` in place of its section (see ``replace_section``)."""
    report.write_text(replace_section(report.read_text(encoding="utf-8"), text, start, end, before), encoding="utf-8")


def replace_section(report: str, text: str, start: str, end: str, before: str = "") -> str:
    """``report`` with the section between the markers ``start`` and ``end`` replaced by
    ``text`` (which carries the markers); a report without it gets it ahead of the
    marker ``before`` where that is there, else at the end."""
    if start in report and end in report:
        return report[: report.index(start)] + text + report[report.index(end) + len(end) :]
    if before and before in report:
        return report.replace(before, text + "\n\n" + before, 1)
    return report.rstrip("\n") + "\n\n" + text + "\n"
