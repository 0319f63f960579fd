"""Tests for middleware.tokens: offline counting that agrees with litellm."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from middleware.tokens import encoding_name_for_model, get_tokenizer

# Any attempt to reach the network in a subprocess fails fast through this dead proxy.
OFFLINE_ENV = {
    **{k: v for k, v in os.environ.items() if k not in {"TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"}},
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "NO_PROXY": "",
}


def run_python(code: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env or OFFLINE_ENV,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_import_does_not_import_litellm() -> None:
    """`import middleware` stays light: litellm (seconds to import) is not loaded."""
    out = run_python("import sys, middleware; print('litellm' in sys.modules)")
    assert out == "False"


def test_counting_works_offline_without_a_tiktoken_cache_dir() -> None:
    """With no cache dir set and the network unreachable, every shipped encoding loads."""
    out = run_python(
        """
        import os
        from middleware.tokens import get_tokenizer
        counts = [get_tokenizer(encoding=e).count("navigate to watchlist") for e in
                  ("cl100k_base", "o200k_base", "p50k_base")]
        print(*counts, "litellm" in os.environ["TIKTOKEN_CACHE_DIR"])
        """
    )
    *counts, bundled = out.split()
    assert bundled == "True"
    assert all(int(count) >= 3 for count in counts)


def test_unavailable_encoding_falls_back_instead_of_downloading() -> None:
    """An encoding litellm does not ship (r50k_base) falls back to cl100k_base offline."""
    out = run_python("from middleware.tokens import get_tokenizer; print(get_tokenizer(encoding='r50k_base').encoding_name)")
    assert out == "cl100k_base"


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o-mini", "o200k_base"),
        ("openai/gpt-4o", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("anthropic/claude-3-5-sonnet-20240620", "cl100k_base"),
        ("ollama/llama3", "cl100k_base"),
    ],
)
def test_encoding_follows_the_model_like_litellm(model: str, encoding: str) -> None:
    """The encoding choice mirrors litellm's: gpt-4o family o200k, tiktoken's map, else cl100k."""
    assert encoding_name_for_model(model) == encoding


def test_special_token_text_is_counted_not_refused() -> None:
    """User text such as '<|endoftext|>' is ordinary text to count."""
    tokenizer = get_tokenizer("gpt-4o-mini")
    assert tokenizer.count("hi <|endoftext|> there") > 3


@pytest.mark.parametrize("model", ["gpt-4o-mini", "gpt-4", "gpt-3.5-turbo"])
def test_message_counts_agree_with_litellm_token_counter(model: str) -> None:
    """Our figure for a prompt equals litellm.token_counter's for the same messages."""
    import litellm

    messages = [
        {"role": "system", "content": "You are Atlas, AI Assistant.\n## Current Context\n- userinterface_name: google_tv"},
        {"role": "user", "content": "[Previous conversation summary]\n• goto shop → Navigated to 'shop' on google_tv"},
        {"role": "assistant", "content": "Understood."},
        {"role": "user", "content": "now show current node 🙂 <|endoftext|>"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_current_node", "arguments": '{"x": 1}'}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"node": "shop"}'},
    ]
    ours = get_tokenizer(model).count_messages(messages)
    assert ours == litellm.token_counter(model=model, messages=messages)


def test_long_text_is_estimated_from_samples_close_to_exact() -> None:
    """Texts beyond the exact limit are estimated within 2% of the exact count."""
    tokenizer = get_tokenizer("gpt-4o-mini")
    text = " ".join(f"word{i} navigate to node_{i % 97}" for i in range(60_000))
    exact = len(tokenizer._encoding.encode_ordinary(text))
    assert abs(tokenizer.count(text) - exact) / exact < 0.02
