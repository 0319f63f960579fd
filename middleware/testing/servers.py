"""Real ``redis-server`` processes for tests: one, or a small cluster, on free loopback
ports, and a fault-injecting proxy in front of one."""

from __future__ import annotations

import random
import shutil
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

__all__ = ["FaultProxy", "RedisCluster", "RedisServer", "free_port"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A ``redis-server`` process on 127.0.0.1 (a free port unless given), nothing
    persisted unless ``extra`` says so (later arguments win). Use as a context manager,
    or ``start()``/``stop()`` it, as often as needed, to test outages.

    >>> with RedisServer(tmp_path) as server:
    ...     mgr = SessionManager(redis_url=server.url)
    """

    def __init__(
        self,
        workdir: str | Path,
        *,
        port: int | None = None,
        binary: str | None = None,
        extra: tuple[str, ...] = (),
        password: str | None = None,
    ) -> None:
        self.binary = binary or shutil.which("redis-server") or "redis-server"
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.password = password
        self.extra = (*extra, "--requirepass", password) if password else extra
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> float:
        """Start the server; returns the ``time.monotonic()`` at which it first answered."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        args = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--dir", str(self.workdir), "--daemonize", "no", "--loglevel", "warning", *self.extra,
        ]  # fmt: skip
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            return self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def wait_ready(self, timeout: float = 10.0) -> float:
        import redis

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if redis.Redis(host="127.0.0.1", port=self.port, password=self.password, socket_timeout=0.5).ping():
                    return time.monotonic()
            except redis.RedisError:
                time.sleep(0.005)
        raise RuntimeError(f"redis-server on port {self.port} did not answer within {timeout:g} s")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def client(self) -> Any:
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password)

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def _cluster_ports(count: int) -> list[int]:
    """Free loopback ports whose cluster bus ports (+10000) are free too."""
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


class RedisCluster:
    """A Redis Cluster of ``masters`` redis-server processes on loopback (no replicas),
    made with ``redis-cli --cluster create``; ``extra`` options go to every node. ``url``
    names its first node; ``node_of(key)`` is the node that serves a key.

    >>> with RedisCluster(tmp_path) as cluster:
    ...     mgr = SessionManager(Config(store={"url": cluster.url, "cluster": True}))
    """

    def __init__(
        self,
        workdir: str | Path,
        *,
        masters: int = 3,
        binary: str | None = None,
        cli: str | None = None,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.cli = cli or shutil.which("redis-cli") or "redis-cli"
        options = ("--cluster-enabled", "yes", "--cluster-node-timeout", "2000", *extra)
        self.nodes = [
            RedisServer(
                Path(workdir) / f"n{i}", port=port, binary=binary, extra=(*options, "--cluster-config-file", f"nodes-{port}.conf")
            )
            for i, port in enumerate(_cluster_ports(masters))
        ]

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def start(self) -> None:
        try:
            for node in self.nodes:
                node.start()
            addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
            subprocess.run([self.cli, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
                           check=True, capture_output=True, timeout=60)  # fmt: skip
            self.wait_ok()
        except BaseException:
            self.stop()  # no node left running behind a failed start
            raise

    def wait_ok(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(node.client().cluster("info").get("cluster_state") == "ok" for node in self.nodes):
                return
            time.sleep(0.1)
        raise RuntimeError("the cluster did not reach cluster_state:ok")

    def node_of(self, key: str) -> RedisServer:
        from redis.crc import key_slot

        slot = key_slot(key.encode())
        for start, end, master, *_ in self.nodes[0].client().cluster("slots"):
            if start <= slot <= end:
                return next(node for node in self.nodes if node.port == int(master[1]))
        raise LookupError(f"no node serves slot {slot}")

    def flush(self) -> None:
        """Empty every node."""
        for node in self.nodes:
            node.client().flushall()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> RedisCluster:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


class FaultProxy:
    """A TCP proxy on 127.0.0.1 in front of a server on loopback, that loses replies on
    demand: ``lose_replies(b"EVALSHA", times=1)`` lets the next request that holds those
    bytes reach the server, waits for the server's reply, and resets the client's
    connection instead of passing it on: the write happened, the client cannot know.
    ``url`` is the server's address through the proxy. Bounded: at most ``max_connections``
    at once; it only ever connects to ``target_port`` on 127.0.0.1.

    >>> with FaultProxy(server.port) as proxy:
    ...     mgr = SessionManager(redis_url=proxy.url)
    ...     proxy.lose_replies(b"EVALSHA")
    """

    def __init__(self, target_port: int, *, max_connections: int = 64) -> None:
        self.target_port, self.max_connections = target_port, max_connections
        self.port = free_port()
        self.lost = 0  # replies lost so far
        self.errors: list[Exception] = []  # what ``meanwhile`` callbacks raised
        self._patterns: tuple[bytes, ...] = ()
        self._times = 0
        self._meanwhile: Callable[[], object] | None = None
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def lose_replies(self, *patterns: bytes, times: int = 1, meanwhile: Callable[[], object] | None = None) -> None:
        """Lose the replies to the next ``times`` requests holding any of ``patterns``;
        ``meanwhile`` runs after each lost reply, before the client's connection is reset
        (another writer acting while the client cannot know its request landed)."""
        with self._lock:
            self._patterns, self._times, self._meanwhile = patterns, times, meanwhile

    def start(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        with self._lock:
            for sock in list(self._open):
                _reset(sock)

    def _accept(self) -> None:
        listener = self._listener
        while listener is not None:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            with self._lock:
                full = len(self._open) >= 2 * self.max_connections
            if full:
                _reset(client)
                continue
            server = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self._open |= {client, server}
            doomed = threading.Event()  # the next reply on this connection is to be lost
            threading.Thread(target=self._pump, args=(client, server, doomed, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, doomed, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, doomed: threading.Event, requests: bool) -> None:
        try:
            while data := source.recv(65536):
                if requests and self._arm(data):
                    doomed.set()
                elif not requests and doomed.is_set():
                    with self._lock:
                        self.lost += 1
                        meanwhile = self._meanwhile
                    if meanwhile is not None:
                        try:
                            meanwhile()
                        except Exception as exc:  # kept for the test to see; the connection is reset all the same
                            self.errors.append(exc)
                    break  # the reply is dropped and the connection reset
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            _reset(sock)
            with self._lock:
                self._open.discard(sock)

    def _arm(self, data: bytes) -> bool:
        with self._lock:
            if self._times and any(pattern in data for pattern in self._patterns):
                self._times -= 1
                return True
            return False

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def _reset(sock: socket.socket) -> None:
    """Close with RST, not FIN: the peer sees a connection reset, as when a network drops.
    (SHUT_RD first wakes a thread blocked reading it, so the close really happens now.)"""
    with suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RD)
    sock.close()
