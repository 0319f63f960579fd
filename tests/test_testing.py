"""Tests for middleware.testing: the helpers users (and our own tests) drive Redis with."""

from __future__ import annotations

from pathlib import Path

import pytest

from middleware import SessionManager
from middleware.testing import RedisServer
from tests.conftest import require_binary


def test_redis_server_runs_a_session_store_and_stops(tmp_path: Path) -> None:
    """As a context manager it serves a real store on loopback, then is gone."""
    with RedisServer(tmp_path, binary=require_binary("redis-server")) as server:
        assert server.url.startswith("redis://127.0.0.1:")
        with SessionManager(redis_url=server.url) as mgr:
            assert mgr.record_turn("s", user="hello", assistant="hi") == 1
        proc = server.proc
        assert proc is not None and proc.poll() is None
    assert server.proc is None and proc.poll() is not None


def test_a_server_that_never_answers_is_stopped_not_left_behind(tmp_path: Path) -> None:
    """A failed start raises and leaves no process running."""
    server = RedisServer(tmp_path, binary=require_binary("redis-server"), extra=("--no-such-option", "x"))
    with pytest.raises(RuntimeError, match="did not answer"):
        server.start(timeout=0.5)
    assert server.proc is None
