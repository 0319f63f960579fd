"""Billing's changes against the full history read as measured: a change too small for one
decimal shows its digits, so "exceeds" never stands beside "+0.0%"."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.billing import (
    COUNTING,
    MODELS,
    Call,
    Model,
    Played,
    Priced,
    _bound_row,
    _coverage_row,
    _less,
    _per_model_rows,
    price,
)
from benchmarks.dataset import Call as BenchCall
from benchmarks.dataset import Turn
from middleware import llm
from middleware.tokens import get_tokenizer


def test_a_change_against_the_full_history_shows_its_sign_and_the_digits_that_matter() -> None:
    assert _less(0.123) == "−12.3%"
    assert _less(-0.048) == "+4.8%"
    assert _less(-0.000022) == "+0.0022%"  # a hair more than the full history: not "+0.0%"
    assert _less(0.0000041) == "−0.00041%"
    assert _less(0.0) == "±0.0%"  # exactly as much
    assert _less(-1e-12) == "+0.000000%"  # beyond six places: the sign still says more


def _call(tools: list[dict[str, Any]], *texts: str) -> Call:
    return Call(tools, [{"role": "system", "content": "Be brief."}, *({"role": "user", "content": t} for t in texts)], True)


def test_the_bound_reads_every_part_a_call_repeats_and_pays_the_rest_in_full() -> None:
    tool = {"type": "function", "function": {"name": "cd", "description": "Change directory.", "parameters": {}}}
    first, second = _call([tool], "go to docs"), _call([tool], "go to docs", "now list it")
    played = Played("x", "x", sessions=[[first, second]])
    priced = price(played, "gpt-5-mini")
    rules = llm.cache_rules("gpt-5-mini")
    assert rules.input_price and rules.read_price and rules.read_price < rules.input_price
    count = get_tokenizer(COUNTING).count_message
    tool_tokens = llm.tool_sizes(COUNTING, [tool])[0]
    system, asked, more = (count(m) for m in second.messages)
    # The first call is all new; the second repeats the tool, the system text and the first message.
    repeated = tool_tokens + system + asked
    expected = (repeated + 3) * rules.input_price + (repeated * rules.read_price + (more + 3) * rules.input_price)
    assert priced.bound == pytest.approx(expected)
    # Short of gpt-5-mini's 1,024-token minimum the provider reads nothing: the bound is below what is billed.
    assert priced.read == 0 and priced.bound < priced.cost
    # A part sent twice in one call is paid in full both times: only an earlier call's parts are read.
    twice = price(Played("x", "x", sessions=[[_call([tool], "go to docs", "go to docs")]]), "gpt-5-mini")
    assert twice.bound == pytest.approx((tool_tokens + system + 2 * asked + 3) * rules.input_price)


def test_a_tool_needed_and_never_sent_counts_as_missed_by_name() -> None:
    played = Played("x", "x")
    model = Model(played)
    tool = {"type": "function", "function": {"name": "cd", "description": "Change directory.", "parameters": {}}}
    model.start(Turn("go to docs and list it", [BenchCall("cd", {"folder": "docs"}, ""), BenchCall("ls", {}, "")]))
    reply = model([{"role": "user", "content": "go to docs and list it"}], [tool])
    assert [c["function"]["name"] for c in reply["tool_calls"]] == ["cd", "ls"]  # the optimistic model calls them all
    assert played.covered == 0 and played.missed == {"ls": 1}


def test_the_bound_says_where_no_layout_of_the_same_parts_meets_the_target() -> None:
    def row(cost: float, bound: float) -> dict[str, Any]:
        return {"priced": {m: Priced(cost=cost, bound=bound) for m in MODELS}}

    full = row(100.0, 0.0)
    short = _bound_row(row(80.0, 65.0), full, "short conversations", 0.40)
    assert "short of 40% even so for gpt-4o-mini" in short and "−35.0%" in short
    reached = _bound_row(row(80.0, 55.0), full, "short conversations", 0.40)
    assert "40% or more for every model: the bound does not rule the target out" in reached and "−45.0%" in reached
    mixed = row(80.0, 55.0)
    mixed["priced"]["gpt-5-mini"] = Priced(cost=80.0, bound=62.0)
    mixed["priced"]["gemini/gemini-2.5-flash"] = Priced(cost=80.0, bound=70.0)
    verdict = _bound_row(mixed, full, "short conversations", 0.40).split(" | ")[-1]
    assert verdict.startswith("short of 40% even so for gpt-5-mini, gemini/gemini-2.5-flash: no order")


def test_coverage_is_given_per_priced_model_and_judged_by_the_lowest() -> None:
    def played(covered: int, loads: int, missed: dict[str, int]) -> Played:
        return Played("x", "x", turns=100, covered=covered, loader_calls=loads, missed=missed)

    by_model = {model: played(100, 9, {}) for model in MODELS}
    assert _coverage_row(by_model, "short conversations").endswith("| met for every priced model |")
    by_model["gpt-4o-mini"] = played(91, 46, {"cd": 6, "lockDoors": 3})
    by_model["gpt-5-mini"] = played(98, 20, {"echo": 2})
    row = _coverage_row(by_model, "short conversations")
    assert "gpt-4o-mini 91.0% (0.46 loader calls per turn)" in row and "claude-sonnet-4-5 100.0% (0.09" in row
    assert "(the lowest, gpt-4o-mini: 9 of 100 turns not covered; still missing most often: `cd` on 6, `lockDoors` on 3)" in row
    assert row.endswith("| not met for gpt-4o-mini, gpt-5-mini |")


def test_the_optimistic_models_coverage_and_loads_are_given_per_model_and_judged_by_the_worst() -> None:
    by_model = {model: Played("x", "x", turns=100, covered=100, loader_calls=12) for model in MODELS}
    by_model["gpt-4o-mini"] = Played("x", "x", turns=100, covered=100, loader_calls=28)
    coverage, loads = _per_model_rows(by_model)
    assert coverage.startswith("| tool coverage ≥99% for every priced model | gpt-4o-mini 100.0%;") and coverage.endswith(
        "| met |"
    )
    assert "gpt-4o-mini 0.28; gpt-5-mini 0.12" in loads and loads.endswith("| met |")
    by_model["gemini/gemini-2.5-flash"] = Played("x", "x", turns=100, covered=97, loader_calls=31)
    coverage, loads = _per_model_rows(by_model)
    assert coverage.endswith("| not met for gemini/gemini-2.5-flash |") and loads.endswith(
        "| not met for gemini/gemini-2.5-flash |"
    )
    (only,) = _per_model_rows({"gpt-4o-mini": by_model["gpt-4o-mini"]})[:1]
    assert only.startswith("| tool coverage ≥99% for gpt-4o-mini |")
