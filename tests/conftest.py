"""Shared fixtures: configs, and real redis-server processes the suite starts itself.

Real servers listen on free loopback ports only. In CI (``CI`` set) a missing
``redis-server`` binary fails the run instead of skipping store tests.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from middleware import Config, SessionManager, load_config, testing

# Tests import litellm directly too; it must never reach for the network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

REPO = Path(__file__).resolve().parent.parent
CONFIG_PATH = REPO / "config.yaml"


def require_binary(name: str) -> str:
    path = shutil.which(name)
    if path:
        return path
    if os.environ.get("CI"):
        pytest.fail(f"{name} is required in CI but was not found on PATH (apt install redis-server)")
    pytest.skip(f"{name} not installed")


class RedisServer(testing.RedisServer):
    """middleware.testing's server, failing in CI (skipping elsewhere) without the binary."""

    def __init__(self, workdir: Path, port: int | None = None, extra: tuple[str, ...] = (), password: str | None = None) -> None:
        super().__init__(workdir, port=port, binary=require_binary("redis-server"), extra=extra, password=password)


def cluster_ports(count: int) -> list[int]:
    """Free loopback ports whose cluster bus ports (+10000) are free too."""
    import random

    ports: list[int] = []
    while len(ports) < count:
        port = random.randint(20000, 45000)
        if port in ports:
            continue
        try:
            for candidate in (port, port + 10000):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        ports.append(port)
    return ports


class RedisClusterProcesses:
    """A 3-master Redis Cluster on loopback, made with redis-cli --cluster create."""

    def __init__(self, workdir: Path) -> None:
        self.nodes = [
            RedisServer(workdir / f"n{i}", port, ("--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf",
                                                  "--cluster-node-timeout", "2000"))
            for i, port in enumerate(cluster_ports(3))
        ]  # fmt: skip

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def start(self) -> None:
        cli = require_binary("redis-cli")
        try:
            for node in self.nodes:
                node.start()
            addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
            subprocess.run([cli, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
                           check=True, capture_output=True, timeout=60)
            self.wait_ok()
        except BaseException:
            self.stop()  # no node left running behind a failed start
            raise

    def wait_ok(self, timeout: float = 30.0) -> None:
        import redis

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = [redis.Redis(host="127.0.0.1", port=n.port).cluster("info").get("cluster_state") for n in self.nodes]
            if all(state == "ok" for state in states):
                return
            time.sleep(0.1)
        raise RuntimeError("the cluster did not reach cluster_state:ok")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterProcesses]:
    cluster = RedisClusterProcesses(tmp_path_factory.mktemp("cluster"))
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
def cluster_url(redis_cluster: RedisClusterProcesses) -> str:
    import redis

    for node in redis_cluster.nodes:
        redis.Redis(host="127.0.0.1", port=node.port).flushall()
    return redis_cluster.url


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture
def real_redis_url(redis_server: RedisServer) -> str:
    redis_server.client().flushall()
    return redis_server.url


@pytest.fixture(scope="session")
def atlas() -> Config:
    """The shipped default configuration (the Atlas assistant)."""
    return load_config(CONFIG_PATH)


@pytest.fixture(params=["memory", "redis"])
def store_url(request: pytest.FixtureRequest) -> str:
    """Each store test runs on the embedded fakeredis store and on a real redis-server."""
    if request.param == "memory":
        return f"memory://test-{uuid.uuid4().hex}"
    return request.getfixturevalue("real_redis_url")


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    """A usage log of the test's own (never the working directory's)."""
    return tmp_path / "usage.jsonl"


@pytest.fixture
def manager(atlas: Config, store_url: str, log_path: Path) -> Iterator[SessionManager]:
    with SessionManager(atlas.with_overrides(usage_log={"path": str(log_path)}), redis_url=store_url) as mgr:
        yield mgr
