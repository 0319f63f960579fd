"""The worked example's figures (token counts are deterministic, so they are tested)."""

from __future__ import annotations

from benchmarks.worked_example import FINAL_REQUEST, TURNS, replay, window_choice
from middleware import Config


def test_turn_four_saves_at_least_seventy_percent_of_the_history(atlas: Config) -> None:
    """Counting the message history (the system prompt aside), turn 4 saves at least 70%; the whole
    prompt saves more at every later turn than at the one before. replay() also checks that
    the stored full-history counter equals a recount of the naive prompt at every turn."""
    rows = replay(atlas, TURNS, FINAL_REQUEST)
    assert [r.turn for r in rows] == [1, 2, 3, 4]
    assert rows[0].sent == rows[0].full  # nothing to save on the first message
    assert rows[-1].history_saved >= 0.70
    assert [r.saved for r in rows] == sorted(r.saved for r in rows)


def test_summary_of_older_turns_only_costs_less_and_keeps_more(atlas: Config) -> None:
    """cover_recent=false (the default) sends fewer tokens and keeps more earlier turns."""
    (name_off, total_off, _, kept_off), (name_on, total_on, _, kept_on) = window_choice(atlas)
    assert (name_off, name_on) == ("cover_recent=false", "cover_recent=true")
    assert total_off < total_on and kept_off > kept_on
    assert atlas.summary.cover_recent is False
