"""How uvicorn serves the endpoint: bounded connections and deadlines a slow or half-sent
request cannot stretch.

uvicorn closes an idle keep-alive connection after ``timeout_keep_alive`` seconds, but a
connection that trickles a byte of its request head now and then stays open for ever, and
so do thousands of them, until the process runs out of file descriptors and keyed clients
are refused. ``GuardedH11Protocol`` gives every request head the same deadline, however
slowly it comes; ``options`` is what ``middleware serve`` (and ``middleware.testing.serving``)
hands uvicorn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import sys
from typing import Any

import h11
import orjson
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..config.service import ServeConfig
from .wire import error_body

__all__ = ["GuardedH11Protocol", "log_to_stderr", "options", "raise_file_limit"]


# A request head's bytes at most (its request line and headers). h11's own bound holds only
# for a head still incomplete after a read, so a larger one sent at once passed.
HEAD_BYTES = 64 * 1024
_HEAD_END = b"\r\n\r\n"


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, with a deadline for each request head: a connection that has
    not sent a whole request head within ``timeout_keep_alive`` seconds of connecting (or of
    its last response) is closed, however slowly it sends; and a bound on its size: a head
    past ``HEAD_BYTES`` is a 431 in OpenAI's error shape, and the connection closes."""

    _head_deadline: asyncio.TimerHandle | None = None
    _head_bytes = 0  # the bytes of the head coming in so far
    _tail = b""  # the last bytes of them, where the head's end may begin

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE and not self._within(data):
            return
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the head is in: the app's own limits take over
            self._disarm()

    def _within(self, data: bytes) -> bool:
        """Whether the head ``data`` continues stays within HEAD_BYTES; if not, it is refused."""
        seen = self._tail + data
        end = seen.find(_HEAD_END)
        size = self._head_bytes + (end + len(_HEAD_END) - len(self._tail) if end >= 0 else len(data))
        if size > HEAD_BYTES:
            body = orjson.dumps(error_body(431, f"The request head has more than {HEAD_BYTES:,} bytes; expected at most "
                                                f"{HEAD_BYTES:,} (the request line and headers).", code="request_header_too_large"))  # fmt: skip
            self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
                                 b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
            self.transport.close()
            return False
        self._head_bytes, self._tail = (size, seen[-(len(_HEAD_END) - 1) :]) if end < 0 else (0, b"")
        return True

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._head_deadline = self.loop.call_later(self.timeout_keep_alive, self._late)

    def _disarm(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _late(self) -> None:
        self._head_deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


def options(serve: ServeConfig) -> dict[str, Any]:
    """What uvicorn is given to serve the endpoint within ``serve``'s bounds."""
    return {
        "http": GuardedH11Protocol,
        "limit_concurrency": serve.max_connections,  # beyond it, new requests get a 503 at once
        "timeout_keep_alive": serve.idle_timeout_seconds,  # idle connections, and the deadline of a request head
        "h11_max_incomplete_event_size": HEAD_BYTES,  # a request head's bytes, still incomplete (see GuardedH11Protocol)
        "log_level": "warning",
    }


def raise_file_limit(wanted: int) -> int:
    """Raise this process's open-file limit towards ``wanted`` (within the hard limit), so that
    ``serve.max_connections`` connections fit; the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return target
    return soft


def log_to_stderr() -> None:
    """Print the endpoint's events (its access lines, its warnings) on stderr, one line each,
    as a server's operator expects; an application that set up logging for the
    ``middleware`` logger keeps its own setup."""
    logger = logging.getLogger("middleware")
    if logger.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
