"""Worker functions for multi-process tests (importable by spawned processes)."""

from __future__ import annotations

import random

from middleware import SessionManager, ToolCall, load_config
from middleware.demo import CONFIG_PATH as ATLAS_PATH


def record_into_one_session(url: str, session_id: str, worker: int, turns: int) -> int:
    """Record `turns` turns into one shared session; returns how many succeeded."""
    done = 0
    config = load_config(ATLAS_PATH, env={}).with_overrides(usage_log={"path": None})
    with SessionManager(config, redis_url=url) as mgr:
        for i in range(turns):
            mgr.record_turn(
                session_id,
                user=f"w{worker} turn {i}",
                assistant=f"reply w{worker}.{i}",
                tool_calls=[ToolCall(name="navigate_to_node", arguments={"userinterface_name": f"ui{worker}", "node": f"n{i}"})],
            )
            done += 1
    return done


def record_across_sessions(url: str, session_ids: list[str], worker: int, rounds: int) -> int:
    """Write one turn to every session per round, in a shuffled order; returns turns written.

    Every text and context value carries the session id, so a leak between
    sessions shows up in the checks afterwards.
    """
    done = 0
    rng = random.Random(worker)
    config = load_config(ATLAS_PATH, env={}).with_overrides(usage_log={"path": None})
    with SessionManager(config, redis_url=url) as mgr:
        for round_number in range(rounds):
            order = list(session_ids)
            rng.shuffle(order)
            for sid in order:
                mgr.record_turn(
                    sid,
                    user=f"[{sid}] w{worker} r{round_number}",
                    assistant=f"[{sid}] done w{worker} r{round_number}",
                    tool_calls=[ToolCall(name="navigate_to_node", arguments={"userinterface_name": f"ui-{sid}", "node": "x"})],
                )
                done += 1
    return done
