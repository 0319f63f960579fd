"""Shared fixtures: configs, managers of both faces, and the real redis-server processes
the suite starts itself.

Store and manager tests take the ``manager`` (or ``managers``) fixture and run four
times: on the sync and the async manager, each on the embedded store (fakeredis) and
on a real ``redis-server``. The async manager runs behind ``Blocking``, which awaits
each call on the test's own event loop, so one test body checks both faces. Real
servers listen on free loopback ports only; in CI (``CI`` set) a missing
``redis-server`` fails the run instead of skipping.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from middleware import AsyncChatStream, AsyncSessionManager, Config, SessionManager, load_config, testing
from middleware.core.turnloop import ToolOutcome
from middleware.demo import CONFIG_PATH as ATLAS_PATH
from middleware.runner import run
from middleware.store import make_client
from middleware.tools import Toolset

# Tests import litellm directly too; it must never reach for the network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

REPO = Path(__file__).resolve().parent.parent
FACES = ("sync", "async")


def require_binary(name: str) -> str:
    path = shutil.which(name)
    if path:
        return path
    if os.environ.get("CI"):
        pytest.fail(f"{name} is required in CI but was not found on PATH (apt-get install redis-server)")
    pytest.skip(f"{name} not installed")


class RedisServer(testing.RedisServer):
    """middleware.testing's server, failing in CI (skipping elsewhere) without the binary."""

    def __init__(self, workdir: Path, port: int | None = None, extra: tuple[str, ...] = (), password: str | None = None) -> None:
        super().__init__(workdir, port=port, binary=require_binary("redis-server"), extra=extra, password=password)


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[testing.RedisCluster]:
    with testing.RedisCluster(
        tmp_path_factory.mktemp("cluster"), binary=require_binary("redis-server"), cli=require_binary("redis-cli")
    ) as cluster:
        yield cluster


@pytest.fixture
def cluster_url(redis_cluster: testing.RedisCluster) -> str:
    redis_cluster.flush()
    return redis_cluster.url


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture
def real_redis_url(redis_server: RedisServer) -> str:
    redis_server.client().flushall()
    return redis_server.url


def wait_for_health(url: str, alive: Callable[[], bool], log: Path | None = None, timeout: float = 60) -> None:
    """Wait until ``url`` answers 200, while ``alive()`` says the server's process runs; fail
    with the end of its ``log`` if it stops or does not answer within ``timeout`` seconds."""
    import time

    import httpx

    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url).status_code == 200:
                return
        except httpx.TransportError:
            pass
        said = log.read_text()[-2000:] if log is not None and log.exists() else ""
        assert alive() and time.monotonic() < deadline, f"{url} did not come up: {said}"
        time.sleep(0.1)


@pytest.fixture(autouse=True)
def _in_a_folder_of_its_own(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs in an empty folder of its own: what the library writes by default (the
    usage log, middleware-usage.jsonl) lands there, never in the checkout or the user's folder."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))


@pytest.fixture(scope="session")
def atlas() -> Config:
    """The demo's configuration (the Atlas device-navigation assistant)."""
    return load_config(ATLAS_PATH, env={})


@pytest.fixture(params=["memory", "redis"])
def store_url(request: pytest.FixtureRequest) -> str:
    """Each store test runs on the embedded fakeredis store and on a real redis-server."""
    if request.param == "memory":
        return f"memory://test-{uuid.uuid4().hex}"
    return str(request.getfixturevalue("real_redis_url"))


@pytest.fixture
def raw(store_url: str) -> Iterator[Any]:
    """A plain sync redis-py client on the store under test, to look behind the manager's back."""
    client = make_client(store_url, Config().store)
    yield client
    client.close()


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    """A usage log of the test's own (never the working directory's)."""
    return tmp_path / "usage.jsonl"


class Blocking:
    """An AsyncSessionManager behind the sync manager's interface: each call is awaited on
    ``loop``; streams become iterators, wrapped chatbots plain functions."""

    def __init__(self, manager: AsyncSessionManager, loop: asyncio.AbstractEventLoop) -> None:
        self.manager, self.loop = manager, loop

    def _wait(self, value: Any) -> Any:
        value = self.loop.run_until_complete(value) if inspect.isawaitable(value) else value
        return BlockingStream(value, self.loop) if isinstance(value, AsyncChatStream) else value

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.manager, name)
        if not callable(value) or inspect.isclass(value):
            return value
        return lambda *args, **kwargs: self._wait(value(*args, **kwargs))

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        wrapped = self.manager.wrap(fn)
        return lambda *args, **kwargs: self._wait(wrapped(*args, **kwargs))

    def close(self) -> None:
        self.loop.run_until_complete(self.manager.close())

    def __enter__(self) -> Blocking:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return repr(self.manager)


class BlockingStream:
    """An AsyncChatStream iterated from sync code."""

    def __init__(self, stream: AsyncChatStream, loop: asyncio.AbstractEventLoop) -> None:
        self.stream, self.loop = stream, loop

    def __iter__(self) -> BlockingStream:
        return self

    def __next__(self) -> str:
        try:
            return self.loop.run_until_complete(self.stream.__anext__())
        except StopAsyncIteration:
            raise StopIteration from None

    def close(self) -> None:
        self.loop.run_until_complete(self.stream.aclose())

    @property
    def result(self) -> Any:
        return self.stream.result


Manager = SessionManager | Blocking
ManagerFactory = Callable[..., Manager]


@pytest.fixture(params=FACES)
def face(request: pytest.FixtureRequest) -> str:
    """The manager under test: "sync" (SessionManager) or "async" (AsyncSessionManager)."""
    return str(request.param)


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """The test's event loop, shut down as asyncio.run does (tasks left behind, such as
    litellm's logging worker, are cancelled first)."""
    event_loop = asyncio.new_event_loop()
    yield event_loop
    pending = asyncio.all_tasks(event_loop)
    for task in pending:
        task.cancel()
    if pending:
        event_loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    event_loop.run_until_complete(event_loop.shutdown_asyncgens())
    event_loop.close()


def open_manager(face: str, config: Config, loop: asyncio.AbstractEventLoop, **kwargs: Any) -> Manager:
    """A manager of ``face`` ("sync" or "async", the latter behind Blocking on ``loop``)."""
    if face == "sync":
        return SessionManager(config, **kwargs)
    return Blocking(AsyncSessionManager(config, **kwargs), loop)


def _factory(
    face: str, atlas: Config, url: str, log_path: Path, loop: asyncio.AbstractEventLoop, opened: list[Manager]
) -> ManagerFactory:
    def open_one(config: Config | None = None, **kwargs: Any) -> Manager:
        config = config if config is not None else atlas.with_overrides(usage_log={"path": str(log_path)})
        kwargs.setdefault("redis_url", url)
        manager = open_manager(face, config, loop, **kwargs)
        opened.append(manager)
        return manager

    return open_one


@pytest.fixture
def managers(
    face: str, atlas: Config, store_url: str, log_path: Path, loop: asyncio.AbstractEventLoop
) -> Iterator[ManagerFactory]:
    """``managers(config=atlas, **kwargs)`` opens a manager of the face under test on the store
    under test (writing its usage log to the test's folder); all are closed afterwards."""
    opened: list[Manager] = []
    yield _factory(face, atlas, store_url, log_path, loop, opened)
    for manager in opened:
        manager.close()


@pytest.fixture
def redis_managers(
    face: str, atlas: Config, real_redis_url: str, log_path: Path, loop: asyncio.AbstractEventLoop
) -> Iterator[ManagerFactory]:
    """``managers`` on the real redis-server only, for what fakeredis cannot show."""
    opened: list[Manager] = []
    yield _factory(face, atlas, real_redis_url, log_path, loop, opened)
    for manager in opened:
        manager.close()


@pytest.fixture
def manager(managers: Callable[..., Manager]) -> Manager:
    """A manager of the face under test on the store under test, with the Atlas config."""
    return managers()


def concurrently(manager: Manager, workers: int, call: Callable[[Any, int], Any], *, each: int = 1) -> list[Any]:
    """``workers`` workers at once, each making ``each`` calls in turn, ``call(m, i)`` with i
    running over range(workers * each): threads on the sync manager; tasks on the async one,
    where ``m`` is the AsyncSessionManager and ``call`` returns an awaitable."""
    results: list[Any] = [None] * (workers * each)
    if isinstance(manager, Blocking):
        inner = manager.manager

        async def work_async(worker: int) -> None:
            for index in range(worker * each, (worker + 1) * each):
                results[index] = await call(inner, index)

        async def gather() -> None:
            await asyncio.gather(*(work_async(w) for w in range(workers)))

        manager.loop.run_until_complete(gather())
        return results
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for index in range(worker * each, (worker + 1) * each):
                results[index] = call(manager, index)
        except BaseException as exc:  # pragma: no cover - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def run_call(toolset: Toolset, call_id: str, name: str, arguments: Any) -> ToolOutcome:
    """Run one tool call the way the sync face of a chat turn does."""
    return run(toolset.call(call_id, name, arguments))


async def no_store(batch: Any) -> list[Any]:
    raise AssertionError("a tool call needs no store")
