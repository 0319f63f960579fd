"""Tests for middleware.llm's accounting: provider usage, cost and caching rules by model."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from middleware import llm


def test_provider_cache_reads_and_writes_are_read_from_litellm_usage() -> None:
    """litellm reports Anthropic's cache_read/cache_creation as prompt_tokens_details; both
    are logged (writes only when there are some)."""
    lib = llm.litellm()
    usage = lib.Usage(prompt_tokens=3000, completion_tokens=20, total_tokens=3020,
                      cache_read_input_tokens=2000, cache_creation_input_tokens=500)  # fmt: skip
    assert llm.usage_of(usage) == {
        "prompt_tokens": 3000,
        "completion_tokens": 20,
        "cached_tokens": 2000,
        "cache_write_tokens": 500,
    }
    plain = lib.Usage(prompt_tokens=10, completion_tokens=2, total_tokens=12)
    assert llm.usage_of(plain)["cached_tokens"] in (None, 0) and "cache_write_tokens" not in llm.usage_of(plain)
    assert llm.usage_of(None) == {"prompt_tokens": None, "completion_tokens": None, "cached_tokens": None}


def test_cost_prices_cache_reads_and_writes_at_their_own_prices() -> None:
    """Claude Sonnet 4.5: 500 tokens at input, 2,000 read at a tenth, 500 written at 1.25x."""
    usage = {"prompt_tokens": 3000, "completion_tokens": 0, "cached_tokens": 2000, "cache_write_tokens": 500}
    assert llm.cost_of("claude-sonnet-4-5", usage) == pytest.approx(500 * 3e-06 + 2000 * 3e-07 + 500 * 3.75e-06)


@pytest.mark.parametrize(
    ("model", "kind"),
    [("gpt-4o-mini", "openai"), ("azure/gpt-4o", "openai"), ("scripted/atlas", "openai"), ("anthropic/claude-sonnet-4-5", "anthropic"),
     ("bedrock/anthropic.claude-opus-4-7", "anthropic"), ("gemini/gemini-2.5-flash", "gemini"), ("acme/unknown", "none")],
)  # fmt: skip
def test_each_model_gets_its_providers_caching_rules(model: str, kind: str) -> None:
    assert llm.cache_rules(model).kind == kind


def test_tool_sizes_split_the_exact_count_among_the_schemas() -> None:
    tools = [{"type": "function", "function": {"name": f"t{i}", "description": "does " * (i + 1), "parameters": {"type": "object", "properties": {}}}}
             for i in range(5)]  # fmt: skip
    sizes = llm.tool_sizes("gpt-4o-mini", tools)
    assert sum(sizes) == llm.tools_tokens("gpt-4o-mini", tools) and all(size > 0 for size in sizes)
    assert llm.tool_sizes("gpt-4o-mini", None) == []


def test_litellm_imported_first_gets_a_warning_that_says_how_to_stay_offline() -> None:
    """Found: importing litellm (or langchain_litellm) before middleware made litellm fetch its
    price map (warnings offline, seconds of retries behind a proxy), and ruff's import sorting
    puts litellm first. middleware cannot undo the fetch; it says once what happened and the
    one setting that keeps litellm offline whatever the import order, and stays quiet with it."""
    env = {k: v for k, v in os.environ.items() if k != "LITELLM_LOCAL_MODEL_COST_MAP"}
    code = "import litellm\nimport middleware\n"
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0 and "set LITELLM_LOCAL_MODEL_COST_MAP=True in the environment" in first.stderr
    quiet = subprocess.run([sys.executable, "-c", code], env={**env, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert quiet.returncode == 0 and "price map" not in quiet.stderr and "cost map" not in quiet.stderr
    after = subprocess.run([sys.executable, "-c", "import middleware\nimport litellm\n"], env=env, capture_output=True,
                           text=True, timeout=120)  # fmt: skip
    assert after.returncode == 0 and "price map" not in after.stderr and "cost map" not in after.stderr


@pytest.mark.parametrize(
    ("model", "price_as", "expands"),
    [
        ("claude-sonnet-4-5", None, True),
        ("anthropic/claude-haiku-4-5-20251001", None, True),
        ("claude-opus-4-5-20251101", None, True),
        ("anthropic/claude-sonnet-5", None, True),
        ("claude-sonnet-4-20250514", None, False),  # Claude 4: before tool search
        ("claude-opus-4-1-20250805", None, False),
        ("claude-3-5-sonnet-20241022", None, False),
        ("gpt-4o-mini", None, False),
        ("gemini/gemini-2.5-flash", None, False),
        ("openai/my-claude-sonnet-4-5-proxy", "claude-sonnet-4-5", False),  # called by another name: its route decides
        ("scripted/bench", "claude-sonnet-4-5", True),  # a scripted model stands for the model it is priced as
        ("scripted/bench", None, False),
    ],
)
def test_tool_references_go_to_claude_models_with_tool_search_only(model: str, price_as: str | None, expands: bool) -> None:
    """Anthropic expands tool references for Claude 4.5 and later (its tool search); the
    model called decides, by litellm's price map or its name."""
    assert llm.expands_tool_references(model, price_as) is expands
