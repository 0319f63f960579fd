"""Helpers for testing code that uses ``middleware`` (and for our own tests)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .events import _sinks, _sinks_lock

__all__ = ["CHROMIUM_FLAGS", "RedisServer", "capture_events", "free_port", "screenshot", "serve"]


@contextmanager
def capture_events() -> Iterator[list[dict[str, Any]]]:
    """Collect the library's structlog events (debug level included) as dicts.

    >>> with capture_events() as events:
    ...     mgr.record_turn("s1", user="hi", assistant="hello")
    >>> [e["event"] for e in events]
    ['summary.updated', 'turn.recorded']
    """
    events: list[dict[str, Any]] = []
    with _sinks_lock:
        _sinks.append(events)
    try:
        yield events
    finally:
        with _sinks_lock:
            _sinks.remove(events)


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


# Headless Chromium with nothing reaching the network (no updates, sync or QUIC probes).
CHROMIUM_FLAGS = (
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--hide-scrollbars",
)  # fmt: skip


def screenshot(chromium: str, url: str, out: str | Path, *, size: str = "900,1080", timeout: float = 120) -> None:
    """A PNG of ``url`` taken by headless ``chromium`` (the binary's path), with a throwaway profile."""
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([chromium, "--headless", *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={size}",
                        f"--screenshot={out}", url], check=True, capture_output=True, timeout=timeout)  # fmt: skip


@contextmanager
def serve(app: Any, timeout: float = 10.0) -> Iterator[str]:
    """Serve an ASGI app (``create_app(mgr)``, say) with uvicorn on a free loopback port in
    a background thread; yields its base URL, stops it afterwards."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout)
