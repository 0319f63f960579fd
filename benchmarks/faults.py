"""Figures for load and faults on a real redis-server started here.

- concurrency: 8 processes x 100 turns into one session, and 8 processes writing
  200 sessions at once: turns written, turns the counters show, time taken;
- outage: how fast a call fails when the server is down (refused) and when it
  hangs (SIGSTOP), how soon the same process works after a restart, and how many
  turns recorded during an outage in degrade mode reach Redis afterwards.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import random
import shutil
import signal
import statistics
import tempfile
import threading
import time
from typing import Any

from middleware import SessionManager, StoreUnavailableError, load_config
from middleware.demo import CONFIG_PATH as ATLAS_PATH
from middleware.testing import RedisServer

TIMEOUT = 1.0


class Node(RedisServer):
    """A redis-server on a free loopback port, with an append-only file so data survive restarts."""

    def __init__(self) -> None:
        super().__init__(tempfile.mkdtemp(prefix="bench-faults-"), extra=("--appendonly", "yes", "--appendfsync", "always"))

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _config(url: str, mode: str = "raise") -> Any:
    return load_config(ATLAS_PATH, env={}).with_overrides(
        usage_log={"path": None}, store={"url": url, "timeout_seconds": TIMEOUT, "on_store_error": mode}
    )


def _one_session(url: str, worker: int, turns: int) -> tuple[int, float]:
    """Turns written and the seconds the writing took (process start-up excluded)."""
    with SessionManager(_config(url)) as mgr:
        started = time.monotonic()
        for i in range(turns):
            mgr.record_turn("shared", user=f"w{worker} turn {i}", assistant=f"reply {worker}.{i}")
        return turns, time.monotonic() - started


def _many_sessions(url: str, sessions: list[str], worker: int, rounds: int) -> int:
    rng = random.Random(worker)
    written = 0
    with SessionManager(_config(url)) as mgr:
        for _ in range(rounds):
            order = list(sessions)
            rng.shuffle(order)
            for sid in order:
                mgr.record_turn(sid, user=f"[{sid}] w{worker}", assistant=f"[{sid}] ok")
                written += 1
    return written


def concurrency() -> dict[str, Any]:
    node = Node()
    node.start()
    try:
        pool = multiprocessing.get_context("spawn").Pool(8)
        with pool:
            done = pool.starmap(_one_session, [(node.url, w, 100) for w in range(8)])
            written = sum(turns for turns, _ in done)
            one_seconds = max(seconds for _, seconds in done)  # the writers ran side by side
            sessions = [f"s{i:03d}" for i in range(200)]
            started = time.monotonic()
            many = sum(pool.starmap(_many_sessions, [(node.url, sessions, w, 3) for w in range(8)]))
            many_seconds = time.monotonic() - started
        with SessionManager(_config(node.url)) as mgr:
            counted = mgr.get_state("shared").turns
            states = [mgr.get_state(sid) for sid in sessions]
        leaked = sum(1 for sid, st in zip(sessions, states, strict=True) for m in st.recent if f"[{sid}]" not in m["content"])
        return {
            "one_session_written": written, "one_session_counted": counted, "one_session_seconds": one_seconds,
            "sessions": len(sessions), "many_written": many, "many_counted": sum(st.turns for st in states),
            "many_exact": all(st.turns == 24 for st in states), "many_seconds": many_seconds, "leaked": leaked,
        }  # fmt: skip
    finally:
        node.close()


def outage() -> dict[str, Any]:
    # The library warns once per unrecorded turn (as it should); the benchmark reports counts instead.
    logging.getLogger("middleware").setLevel(logging.ERROR)
    node = Node()
    node.start()
    try:
        figures: dict[str, Any] = {"timeout": TIMEOUT}
        with SessionManager(_config(node.url)) as mgr:
            mgr.record_turn("o", user="before", assistant="ok")
            node.stop()
            refused = []
            for _ in range(10):
                started = time.monotonic()
                try:
                    mgr.record_turn("o", user="during", assistant="x")
                except StoreUnavailableError:
                    refused.append(time.monotonic() - started)
            figures["refused_ms"] = statistics.median(refused) * 1000
            figures["refused_errors"] = len(refused)
            ready = node.start()
            mgr.record_turn("o", user="after", assistant="ok")
            figures["recovery_ms"] = (time.monotonic() - ready) * 1000
            figures["kept_across_restart"] = mgr.get_state("o").turns
            assert node.proc is not None
            os.kill(node.proc.pid, signal.SIGSTOP)
            started = time.monotonic()
            try:
                mgr.get_state("o")
            except StoreUnavailableError:
                figures["hung_ms"] = (time.monotonic() - started) * 1000
            finally:
                os.kill(node.proc.pid, signal.SIGCONT)
        with SessionManager(_config(node.url, "degrade")) as mgr:
            attempted = 0
            stop = threading.Event()

            def writer() -> None:
                nonlocal attempted
                while not stop.is_set():
                    mgr.record_turn("d", user=f"turn {attempted}", assistant="ok")
                    attempted += 1
                    time.sleep(0.005)

            thread = threading.Thread(target=writer)
            thread.start()
            time.sleep(0.3)
            node.stop()
            time.sleep(0.5)
            node.start()
            time.sleep(0.3)
            stop.set()
            thread.join()
            mgr.record_turn("d", user="final", assistant="ok")
            figures["degrade_attempted"] = attempted + 1
            figures["degrade_stored"] = mgr.get_state("d").turns
        return figures
    finally:
        node.close()
