"""Browser helpers for the page tests and docs/screenshots.py: headless Chromium with
nothing reaching the network, and an ASGI app served on a free loopback port."""

from __future__ import annotations

import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["CHROMIUM_FLAGS", "screenshot", "serve"]

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
