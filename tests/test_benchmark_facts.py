"""The tool-free benchmark's candidate ceiling counts what the store found, not what was kept."""

from __future__ import annotations

from benchmarks.facts import conversations, measure, rows
from middleware import Config


def test_the_candidate_ceiling_counts_answers_the_budget_left_out() -> None:
    """With a recall budget too small for any line, nothing is answered from memory, yet
    the answers the store sent back to be ranked are still within reach; with the default
    budget what is answered is within reach too, and the ceiling is no lower."""
    config = Config().with_overrides(usage_log={"path": None})
    found = {
        row["strategy"]: row for row in rows(measure(conversations(2), config, {"default": {}, "no room": {"recall_tokens": 1}}))
    }
    assert found["no room"]["answered"] == found["last exchange only"]["answered"] == 0.0
    assert found["no room"]["reached"] > 0.0
    assert found["default"]["reached"] >= found["default"]["answered"] > 0.0
    assert found["full history"]["reached"] == found["full history"]["answered"] == 1.0
