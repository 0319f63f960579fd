"""Concurrency against a real redis-server: processes and many sessions at once."""

from __future__ import annotations

import multiprocessing
import re

import pytest

from middleware import SessionManager, load_config
from middleware.demo import CONFIG_PATH as ATLAS_PATH
from tests.workers import record_across_sessions, record_into_one_session

pytestmark = pytest.mark.slow


def pool(size: int):  # type: ignore[no-untyped-def]
    return multiprocessing.get_context("spawn").Pool(size)


def test_eight_processes_record_into_one_session_without_losing_a_turn(real_redis_url: str) -> None:
    """8 processes x 100 turns into one session: the counter ends at exactly 800."""
    with pool(8) as workers:
        written = workers.starmap(record_into_one_session, [(real_redis_url, "shared", w, 100) for w in range(8)])
    assert sum(written) == 800
    with SessionManager(load_config(ATLAS_PATH, env={}), redis_url=real_redis_url) as mgr:
        state = mgr.get_state("shared")
    assert state.turns == 800
    assert len(state.summary) <= 3 and len(state.recent) == 2
    user, reply = state.recent[0]["content"], state.recent[1]["content"]
    worker, turn = re.fullmatch(r"w(\d) turn (\d+)", user).groups()  # type: ignore[union-attr]
    assert reply == f"reply w{worker}.{turn}"  # the pair comes from one turn
    assert re.fullmatch(r"ui\d", state.context["userinterface_name"])


def test_two_hundred_sessions_written_in_parallel_stay_separate(real_redis_url: str) -> None:
    """8 processes each write every one of 200 sessions 3 times, interleaved: every
    counter is exact (24) and no session holds another's text or context."""
    sessions = [f"sess-{i:03d}" for i in range(200)]
    with pool(8) as workers:
        written = workers.starmap(record_across_sessions, [(real_redis_url, sessions, w, 3) for w in range(8)])
    assert sum(written) == 200 * 8 * 3
    with SessionManager(load_config(ATLAS_PATH, env={}), redis_url=real_redis_url) as mgr:
        for sid in sessions:
            state = mgr.get_state(sid)
            assert state.turns == 24, sid
            assert len(state.summary) <= 3 and len(state.recent) == 2
            texts = [m["content"] for m in state.recent] + state.summary
            assert all(f"[{sid}]" in text for text in texts), (sid, texts)
            assert state.context == {"userinterface_name": f"ui-{sid}"}
            assert state.recent[1]["content"] == state.recent[0]["content"].replace("] w", "] done w", 1)
        page = mgr.list_sessions(page_size=200)
        assert page.total == 200 and len(page.entries) == 200
