"""Secrets: store passwords and API keys never reach logs, errors or reprs."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from middleware import Config, LLMError, SessionManager, ToolCall
from middleware.core.text import redact_secrets
from middleware.scripted import register
from middleware.testing import capture_events

KEY = "sk-live-ABCDEFGHIJKLMNOPQRST"


def test_reprs_hide_the_store_password(atlas: Config) -> None:
    """Config, manager and store reprs show the URL with its password masked."""
    config = atlas.with_overrides(store={"url": "redis://:hunter2@127.0.0.1:1/0"})
    with SessionManager(config) as mgr:
        for text in (repr(config), str(config), repr(config.store), repr(mgr), repr(mgr.store)):
            assert "hunter2" not in text
        assert "***" in repr(mgr.store)


def test_provider_errors_are_redacted(atlas: Config, tmp_path: Path) -> None:
    """A provider error quoting the key becomes an LLMError without it, and the warning
    logged when tools had already run holds no key either."""

    def leaky(messages: Any, tools: Any) -> Any:
        if messages[-1]["role"] == "tool":
            raise RuntimeError(f"Incorrect API key provided: {KEY}. Authorization: Bearer {KEY}")
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "function": {"name": "get_node_tree", "arguments": '{"userinterface_name": "google_tv"}'}}
            ],
        }

    name = f"leaky-{uuid.uuid4().hex[:6]}"
    register(name, leaky)
    config = atlas.with_overrides(usage_log={"path": str(tmp_path / "u.jsonl")})
    with SessionManager(config, redis_url=f"memory://{name}") as mgr, capture_events() as events:
        with pytest.raises(LLMError) as info:
            mgr.chat("s", "show the node tree", model=f"scripted/{name}", api_key=KEY)
    assert KEY not in str(info.value) and "sk-***" in str(info.value)
    assert KEY not in str(events) and any(e["event"] == "chat.failed_after_tools" for e in events)
    assert KEY not in (tmp_path / "u.jsonl").read_text()


def test_logs_hold_no_content_and_no_secrets_by_default(atlas: Config, tmp_path: Path) -> None:
    """Usage lines and debug events from a full chat carry neither text nor credentials."""
    log = tmp_path / "u.jsonl"
    config = atlas.with_overrides(usage_log={"path": str(log)}, store={"url": "memory://secrets-default"})
    with SessionManager(config) as mgr, capture_events() as events:
        mgr.chat("s", "navigate to watchlist on google_tv", model="scripted/atlas", api_key=KEY)
        mgr.record_turn(
            "s",
            user="my password is hunter2",
            assistant="noted",
            tool_calls=[ToolCall(name="navigate_to_node", arguments={"userinterface_name": "hunter2_tv"})],
        )
    written = log.read_text() + repr(events)
    for secret in (KEY, "hunter2", "watchlist on google_tv"):
        assert secret not in written


@pytest.mark.parametrize(
    ("text", "hidden"),
    [
        ("redis://user:pa55@host:6379/0", "pa55"),
        (f"Incorrect API key provided: {KEY}", KEY),
        ("Authorization: Bearer abc.def.ghi", "abc.def.ghi"),
        ('{"api_key": "k-123456"}', "k-123456"),
        ("password=swordfish&db=0", "swordfish"),
        ("AIzaSyA1234567890abcdefghijklmnopqrstu", "AIzaSyA1234567890abcdefghijklmnopqrstu"),
    ],
)
def test_redaction_covers_the_usual_shapes(text: str, hidden: str) -> None:
    """URL passwords, provider keys, bearer tokens and key=value secrets are masked."""
    assert hidden not in redact_secrets(text)
