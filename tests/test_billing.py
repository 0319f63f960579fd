"""Tests for middleware.billing: each session's modelled provider cache, on both sides."""

from __future__ import annotations

import pytest

from middleware import Config, llm
from middleware.core.caching import Split, rules_for
from middleware.tokens import get_tokenizer
from middleware.usage.pricing import Billing

STATIC = "You are a careful assistant. " * 160  # about 960 tokens
TOOLS = [{"type": "function", "function": {"name": f"tool_{i}", "description": "does a thing " * 20, "parameters": {"type": "object", "properties": {}}}}
         for i in range(4)]  # fmt: skip


def billing(**caching: object) -> Billing:
    config = Config().with_overrides(caching=caching) if caching else Config()
    return Billing(config, get_tokenizer("gpt-4o-mini"))


def call(
    bill: Billing, messages: list[dict[str, str]], full: int | None, now: float, model: str = "gpt-4o-mini"
) -> dict[str, object]:
    tokenizer = get_tokenizer("gpt-4o-mini")
    return bill.call("s", model, tools=TOOLS, messages=messages, full_tokens=full, now=now, static_prefix=STATIC,
                     static_tokens=tokenizer.count_chat("system", STATIC))  # fmt: skip


def test_the_stable_prefix_is_read_from_the_second_call_on() -> None:
    """Tools then the static system text (over 1,024 tokens together) are read on the next
    call, in 128-token steps; the changed context after them is billed in full."""
    bill = billing()
    tools_tokens = llm.tools_tokens("gpt-4o-mini", TOOLS)
    static = get_tokenizer("gpt-4o-mini").count_chat("system", STATIC)
    first = call(bill, [{"role": "system", "content": STATIC + "\n- a: 1"}, {"role": "user", "content": "hi"}], 4000, now=0)
    second = call(bill, [{"role": "system", "content": STATIC + "\n- a: 2"}, {"role": "user", "content": "ho"}], 4500, now=10)
    assert first["sent"]["read"] == 0  # type: ignore[index]
    stable = tools_tokens + static
    assert second["sent"]["read"] == stable - stable % 128  # type: ignore[index]
    # The full history's previous call (4,000 tokens, less 3 priming) is its prefix now.
    assert second["full_history"]["read"] == (4000 - 3) - (4000 - 3) % 128  # type: ignore[index]
    rules = rules_for("openai", llm.litellm().model_cost["gpt-4o-mini"])
    expected = Split(read=second["sent"]["read"], uncached=second["sent"]["uncached"]).cost(rules)  # type: ignore[index]
    assert second["sent"]["cost_usd"] == pytest.approx(expected)  # type: ignore[index]
    assert second["saved_pct"] == pytest.approx(
        100 * (1 - second["sent"]["cost_usd"] / second["full_history"]["cost_usd"]), abs=0.1
    )  # type: ignore[index, operator]


def test_a_call_without_a_full_history_counterpart_costs_the_full_side_nothing() -> None:
    bill = billing()
    call(bill, [{"role": "user", "content": "hi"}], 3000, now=0)
    extra = call(bill, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}], None, now=1)
    assert extra["full_history"] == {"read": 0, "written": 0, "uncached": 0, "cost_usd": 0.0}
    later = call(bill, [{"role": "user", "content": "hi"}], 3500, now=2)
    assert later["full_history"]["read"] == 2944  # type: ignore[index]  # still the last counterpart's 2,997


def test_a_cache_gone_cold_reads_nothing_on_either_side() -> None:
    bill = billing(ttl_seconds=60)
    messages = [{"role": "system", "content": STATIC}, {"role": "user", "content": "hi"}]
    call(bill, messages, 3000, now=0)
    cold = call(bill, messages, 3500, now=61)
    assert cold["sent"]["read"] == 0 and cold["full_history"]["read"] == 0  # type: ignore[index]


def test_rules_follow_the_model_or_the_setting() -> None:
    """Claude models get Anthropic's rules (nothing cached without breakpoints); caching.rules
    forces one provider's rules for every model; a model without a price has no saving."""
    messages = [{"role": "system", "content": STATIC}, {"role": "user", "content": "hi"}]
    bill = billing()
    call(bill, messages, 3000, now=0, model="claude-sonnet-4-5")
    claude = call(bill, messages, 3500, now=1, model="claude-sonnet-4-5")
    assert claude["rules"] == "anthropic" and claude["sent"]["read"] == 0 and claude["full_history"]["read"] == 2997  # type: ignore[index]
    assert call(billing(rules="none"), messages, 3000, now=0)["rules"] == "none"
    assert call(billing(), messages, 3000, now=0, model="acme/unknown-model")["saved_pct"] is None


def test_price_as_prices_an_alias_like_a_known_model() -> None:
    """caching.price_as: a name litellm has no price for is priced, and its rules chosen, as the named model."""
    messages = [{"role": "system", "content": STATIC}, {"role": "user", "content": "hi"}]
    aliased = call(billing(price_as="gpt-4o-mini"), messages, 3000, now=0, model="acme/my-proxy")
    assert aliased["rules"] == "openai" and aliased["saved_pct"] is not None
