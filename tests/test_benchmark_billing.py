"""Billing's changes against the full history read as measured: a change too small for one
decimal shows its digits, so "exceeds" never stands beside "+0.0%"."""

from __future__ import annotations

from benchmarks.billing import _less


def test_a_change_against_the_full_history_shows_its_sign_and_the_digits_that_matter() -> None:
    assert _less(0.123) == "−12.3%"
    assert _less(-0.048) == "+4.8%"
    assert _less(-0.000022) == "+0.0022%"  # a hair more than the full history: not "+0.0%"
    assert _less(0.0000041) == "−0.00041%"
    assert _less(0.0) == "±0.0%"  # exactly as much
    assert _less(-1e-12) == "+0.000000%"  # beyond six places: the sign still says more
