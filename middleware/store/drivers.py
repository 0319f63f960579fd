"""The session store: the storage contract and the drivers that talk to Redis.

Every store operation is a plan in this package (``load``, ``record``...); a driver only sends a
plan's batches (a pipeline, or one MULTI/EXEC) and hands back the replies, error
replies in place. ``SessionStore`` and ``AsyncSessionStore`` are the contract the
managers, the CLI and the inspector rely on; ``RedisStore`` (redis-py, or fakeredis
for ``memory://``) and ``AsyncRedisStore`` (``redis.asyncio``) implement it, and
``ThreadedStore`` serves a sync store to async code from a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import threading
from typing import Any, Protocol, TypeVar, runtime_checkable

from ..config.service import StoreConfig
from ..core.effects import Batch, Plan
from ..core.text import redact_url
from ..exceptions import ConfigError, StoreError, StoreUnavailableError
from ..runner import arun, run
from .decoding import error_text
from .packing import packed

__all__ = [
    "AsyncRedisStore",
    "AsyncSessionStore",
    "RedisStore",
    "SessionStore",
    "ThreadedStore",
    "checked_client",
    "checked_store",
    "make_client",
]

T = TypeVar("T")


@runtime_checkable
class SessionStore(Protocol):
    """Runs store plans: ``send`` does one round trip, ``execute`` a whole plan."""

    def send(self, batch: Batch) -> list[Any]: ...

    def execute(self, plan: Plan[T]) -> T: ...

    def close(self) -> None: ...


@runtime_checkable
class AsyncSessionStore(Protocol):
    """``SessionStore`` for asyncio: the same methods, awaited."""

    async def send(self, batch: Batch) -> list[Any]: ...

    async def execute(self, plan: Plan[T]) -> T: ...

    async def close(self) -> None: ...


class _Driver:
    def __init__(self, client: Any, *, url: str = "", owns_client: bool = False) -> None:
        self.client = client
        self.url = url
        self._owns_client = owns_client

    def _single(self, batch: Batch) -> Any:
        """The bound client method for a batch of one command outside a transaction, sent
        as it is: cheaper than a pipeline of one, and the only way a cluster client sends
        a script (its pipelines refuse EVALSHA). None for any other batch."""
        if len(batch.commands) != 1 or batch.transaction:
            return None
        return getattr(self.client, batch.commands[0][0])

    def _pipeline(self, batch: Batch) -> Any:
        pipe = self.client.pipeline(transaction=batch.transaction)
        for command in batch.commands:
            getattr(pipe, command[0])(*command[1:])
        return pipe

    def _failed(self, exc: Exception, *, single: bool) -> list[Any]:
        """A single command's error reply stands in its place, as in a pipeline; anything
        else (no connection, a timeout, a transaction aborted) is a StoreError."""
        if single and isinstance(exc, _response_error()):
            return [exc]
        raise exc if isinstance(exc, StoreError) else _store_error(self.url, exc) from exc

    def __repr__(self) -> str:
        return f"{type(self).__name__}(url={redact_url(self.url)!r})"


class RedisStore(_Driver):
    """A ``SessionStore`` over a redis-py client (fakeredis for ``memory://``)."""

    def __init__(self, client: Any, *, url: str = "", owns_client: bool = False) -> None:
        super().__init__(client, url=url, owns_client=owns_client)
        self._pool = _plain_pool(client)
        self._one_timeout = False  # a cluster client of make_client's: its node connections are _OneTimeout

    @classmethod
    def from_url(cls, url: str, config: StoreConfig) -> RedisStore:
        store = cls(make_client(url, config), url=url, owns_client=True)
        store._one_timeout = config.cluster
        return store

    def _single(self, batch: Batch) -> Any:
        """As ``_Driver._single``; a script on a plain client nothing watches goes by
        ``_script``, on a pooled connection of the store's own."""
        method = super()._single(batch)
        name = batch.commands[0][0] if method is not None else ""
        if name in _SCRIPT_COMMANDS and self._pool is not None and _unwatched(self.client):
            return functools.partial(self._script, _SCRIPT_COMMANDS[name])
        return method

    def send(self, batch: Batch) -> list[Any]:
        if not self._one_timeout:
            return self._send(batch)
        _CALL.hung = set()  # see _OneTimeout
        try:
            return self._send(batch)
        finally:
            _CALL.hung = None

    def _send(self, batch: Batch) -> list[Any]:
        method = self._single(batch)
        try:
            return [method(*batch.commands[0][1:])] if method else self._pipeline(batch).execute(raise_on_error=False)
        except Exception as exc:
            return self._failed(exc, single=method is not None)

    def _script(self, *args: Any) -> Any:
        """A script (``EVALSHA``/``EVAL`` and its arguments) run on a pooled connection as
        the client's ``execute_command`` runs it (the connection's retry policy; a failed
        connection closed before a retry), without the per-command layers around it
        (observability hooks, argument and deprecation checks) that a turn's load and
        record, one script each, would pay on every call."""
        assert self._pool is not None
        connection = self._pool.get_connection()
        try:
            return connection.retry.call_with_retry(lambda: _round_trip(connection, args), lambda _: connection.disconnect())
        finally:
            self._pool.release(connection)

    def execute(self, plan: Plan[T]) -> T:
        return run(plan, self.send)

    def close(self) -> None:
        if self._owns_client:
            self.client.close()


class AsyncRedisStore(_Driver):
    """An ``AsyncSessionStore`` over a ``redis.asyncio`` client (fakeredis for ``memory://``).

    A ``redis.asyncio`` client belongs to the event loop it first ran on: its pool's lock
    and its connections' streams do. A store made from a URL makes a client for each new
    loop it is used on (``asyncio.run`` per call, a worker thread's loop), and closes the
    old one as that loop shuts down (``asyncio.run`` and ``loop.shutdown_asyncgens()`` let
    it); a client left on a loop that closed without that is dropped, never awaited. A
    client given by the caller cannot be remade: on another loop it is refused before
    anything is sent."""

    def __init__(self, client: Any, *, url: str = "", owns_client: bool = False, config: StoreConfig | None = None) -> None:
        super().__init__(client, url=url, owns_client=owns_client)
        self._config = config  # to make a client for another loop (a store made from a URL)
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop ``client`` runs on
        self._closer: Any = None  # the async generator that closes ``client`` as its loop shuts down

    @classmethod
    def from_url(cls, url: str, config: StoreConfig) -> AsyncSessionStore:
        """The async store for ``url``. On a Redis Cluster it is the sync cluster client in
        a worker thread: redis-py's asyncio cluster transactions run every queued command
        through a new thread and event loop (12x slower here, and broken before the
        client has been initialized), while the sync client sends one round trip."""
        if config.cluster and not url.startswith("memory://"):
            return ThreadedStore(RedisStore.from_url(url, config))
        return cls(make_client(url, config, asyncio=True), url=url, owns_client=True, config=config)

    async def _on_this_loop(self) -> None:
        """Make ``client`` the running loop's (see the class)."""
        loop = asyncio.get_running_loop()
        if loop is self._loop:
            return
        if self._loop is not None:
            if self._config is None:
                raise StoreError(
                    f"The redis.asyncio client given for store {redact_url(self.url)} was made for another event loop, "
                    "and a client cannot move between loops (its pool and connections belong to the first). Nothing "
                    "was sent. Make the client on this loop, or give redis_url= and the manager makes one per loop."
                )
            self.client = make_client(self.url, self._config, asyncio=True)  # the old one is its loop's to close
        self._loop = loop
        if self._owns_client:
            self._closer = _closer(self.client)
            await anext(self._closer)  # now registered with the loop: closed by its shutdown_asyncgens()

    async def send(self, batch: Batch) -> list[Any]:
        if asyncio.get_running_loop() is not self._loop:
            await self._on_this_loop()
        method = self._single(batch)
        try:
            return [await method(*batch.commands[0][1:])] if method else await self._pipeline(batch).execute(raise_on_error=False)
        except Exception as exc:
            return self._failed(exc, single=method is not None)

    async def execute(self, plan: Plan[T]) -> T:
        return await arun(plan, self.send)

    async def close(self) -> None:
        if self._loop is not None and self._loop is not asyncio.get_running_loop():
            return  # a client on another loop is that loop's to close (see the class)
        closer, self._closer, self._loop = self._closer, None, None
        if closer is not None:
            await closer.aclose()  # closes the client
        elif self._owns_client:
            await self.client.aclose()


async def _closer(client: Any) -> Any:
    """Suspended once, closes ``client`` when its loop's ``shutdown_asyncgens()`` closes it."""
    try:
        yield
    finally:
        await client.aclose()


class ThreadedStore:
    """A sync ``SessionStore`` served to async code: each round trip in a worker thread,
    so the event loop never waits on a socket."""

    def __init__(self, store: SessionStore) -> None:
        self.store = store

    async def send(self, batch: Batch) -> list[Any]:
        return await asyncio.to_thread(self.store.send, batch)

    async def execute(self, plan: Plan[T]) -> T:
        return await arun(plan, self.send)

    async def close(self) -> None:
        await asyncio.to_thread(self.store.close)

    def __repr__(self) -> str:
        return repr(self.store)


# --- what a manager is given ---------------------------------------------------


def _kind(value: Any) -> str:
    """A value's type as an error names it (never the value: a URL may hold a password)."""
    kind = type(value)
    return (kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}")[:80]


def checked_client(client: Any, *, asyncio: bool) -> Any:
    """``client`` if it is a redis-py client for the manager's face (``asyncio``: a
    ``redis.asyncio`` one) that replies in bytes, as every store read expects; else a
    ConfigError naming its type and what was expected."""
    import redis
    import redis.asyncio
    import redis.asyncio.cluster
    import redis.cluster

    sync_kinds, async_kinds = (redis.Redis, redis.cluster.RedisCluster), (redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster)
    manager, expected = ("AsyncSessionManager", "a redis.asyncio client (redis.asyncio.Redis)") if asyncio else (
        "SessionManager", "a redis-py client (redis.Redis or redis.cluster.RedisCluster)")  # fmt: skip
    given = f"client is a {_kind(client)}; {manager} expects {expected}"
    if isinstance(client, (str, bytes)):
        raise ConfigError(f"{given}. Give a URL as redis_url=, not client=.", key="client")
    if isinstance(client, async_kinds if not asyncio else sync_kinds):
        other = "SessionManager" if asyncio else "AsyncSessionManager"
        raise ConfigError(f"{given}. This client is for {other}: use that manager, or a client of this one's kind.", key="client")
    if not isinstance(client, async_kinds if asyncio else sync_kinds):
        raise ConfigError(f"{given}. To run the store's commands through something else, give store= instead.", key="client")
    encoder = getattr(client, "get_encoder", None)
    if callable(encoder) and getattr(encoder(), "decode_responses", False):
        raise ConfigError(
            f"client ({_kind(client)}) was made with decode_responses=True; the store reads bytes (stored records "
            "are decoded where they are read): make the client without decode_responses, or give redis_url=.",
            key="client",
        )
    return client


def checked_store(store: Any, *, asyncio: bool) -> Any:
    """``store`` if it has the contract of the manager's face (``SessionStore``, or with
    ``asyncio`` ``AsyncSessionStore``, whose ``send`` is awaited); else a ConfigError."""
    contract, manager = ("AsyncSessionStore", "AsyncSessionManager") if asyncio else ("SessionStore", "SessionManager")
    given = f"store is a {_kind(store)}; {manager} expects {'an' if asyncio else 'a'} {contract} (send(batch), execute(plan), close())"
    if not isinstance(store, AsyncSessionStore if asyncio else SessionStore):
        raise ConfigError(f"{given}. For a redis-py client give client=, for a URL redis_url=.", key="store")
    if inspect.iscoroutinefunction(store.send) != asyncio:
        hint = "wrap a sync store in ThreadedStore(store)" if asyncio else "use AsyncSessionManager for an async store"
        raise ConfigError(f"{given}, and its send is {'not ' if asyncio else ''}a coroutine function: {hint}.", key="store")
    return store


# --- clients -----------------------------------------------------------------

_SCRIPT_COMMANDS = {"evalsha": "EVALSHA", "eval": "EVAL"}  # what a plain client's scripts are sent as


def _plain_pool(client: Any) -> Any:
    """The connection pool of a plain ``redis.Redis`` client (not a subclass such as
    fakeredis's, nor a single-connection client), whose scripts ``RedisStore`` sends on
    a pooled connection itself; else None."""
    import redis

    return client.connection_pool if type(client) is redis.Redis and client.connection is None else None


def _unwatched(client: Any) -> bool:
    """Nothing watches the client's commands: its ``execute_command`` is redis-py's own,
    not wrapped by an instrumentation (OpenTelemetry's wraps the class's) nor replaced on
    the client, no response callback is set for scripts, and redis-py's own telemetry is
    off. Otherwise scripts go through the client."""
    redis_class, own, telemetry = _redis_py()
    if "execute_command" in vars(client) or redis_class.execute_command is not own:
        return False
    callbacks = getattr(client, "response_callbacks", None)
    if callbacks is None or "EVALSHA" in callbacks or "EVAL" in callbacks:  # a reply the client would remake
        return False
    if telemetry is None:  # a redis-py without telemetry of its own
        return True
    try:
        manager = telemetry().get_provider_manager()
        return manager is None or not manager.config.enabled_telemetry
    except Exception:  # an API that moved: send through the client, which knows its own
        return False


@functools.cache
def _redis_py() -> tuple[Any, Any, Any]:
    """``redis.Redis``, its own ``execute_command`` (under any wrapper put on it) and
    redis-py's telemetry instance getter (None where it has none)."""
    import redis

    telemetry: Any = None
    with contextlib.suppress(ImportError):
        from redis.observability.providers import get_observability_instance as telemetry
    return redis.Redis, inspect.unwrap(redis.Redis.execute_command), telemetry


def _round_trip(connection: Any, args: tuple[Any, ...]) -> Any:
    encoder = connection.encoder
    wire = packed(args, encoder.encoding, encoder.encoding_errors)
    if wire is None:
        connection.send_command(*args)
    else:
        connection.send_packed_command(wire)
    return connection.read_response()


_MEMORY_SERVERS: dict[str, Any] = {}
_MEMORY_LOCK = threading.Lock()


def _memory_server(url: str) -> Any:
    import fakeredis

    name = url.split("://", 1)[1] or "default"
    with _MEMORY_LOCK:
        if name not in _MEMORY_SERVERS:
            _MEMORY_SERVERS[name] = fakeredis.FakeServer()
        return _MEMORY_SERVERS[name]


def _client_options(config: StoreConfig, *, asyncio: bool) -> dict[str, Any]:
    """Timeouts, and one immediate retry on connection errors only.

    redis-py's default (10 retries with exponential backoff) would hold a caller for
    tens of seconds during an outage. One retry heals a pooled connection left stale
    by a server restart; a timeout is not retried, so a hung server costs one timeout
    (on a cluster too: see ``_OneTimeout``).
    """
    import redis
    from redis.backoff import NoBackoff

    if asyncio:
        from redis.asyncio.retry import Retry
    else:
        from redis.retry import Retry  # type: ignore[assignment]
    return {
        "socket_timeout": config.timeout_seconds,
        "socket_connect_timeout": config.timeout_seconds,
        "retry": Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
    }


_CALL = threading.local()  # hung: the nodes that timed out in this thread's store call under way, or None


class _OneTimeout:
    """A cluster node connection that, within one store call, sends a node that timed out
    nothing more. redis-py's cluster client retries a timeout (its ``retry``'s count, and a
    pipeline's timed-out commands once each, whatever that count): each retry waits
    another timeout, and sends a write the node may have applied again. One retry on a
    connection error stays (a stale connection to a restarted node): that command never
    reached the node. Outside a store call (``RedisStore.send``) it is a plain connection."""

    host: str
    port: int

    def _once(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        import redis

        hung = getattr(_CALL, "hung", None)
        if hung is not None and (self.host, self.port) in hung:
            raise redis.TimeoutError(f"Timeout: {self.host}:{self.port} did not answer in time; not sent again")
        try:
            return call(*args, **kwargs)
        except redis.TimeoutError:
            if hung is not None:
                hung.add((self.host, self.port))
            raise

    def connect_check_health(self, *args: Any, **kwargs: Any) -> Any:
        return self._once(super().connect_check_health, *args, **kwargs)  # type: ignore[misc]

    def send_packed_command(self, *args: Any, **kwargs: Any) -> Any:
        return self._once(super().send_packed_command, *args, **kwargs)  # type: ignore[misc]

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        return self._once(super().read_response, *args, **kwargs)  # type: ignore[misc]


_ONE_TIMEOUT: dict[type[Any], type[Any]] = {}  # each connection class, made a _OneTimeout


def _one_timeout(connection_class: type[Any]) -> type[Any]:
    """``connection_class`` (a plain or a TLS connection) made a ``_OneTimeout``."""
    made = _ONE_TIMEOUT.get(connection_class)
    if made is None:
        name = f"OneTimeout{connection_class.__name__}"
        made = _ONE_TIMEOUT[connection_class] = type(name, (_OneTimeout, connection_class), {"__module__": __name__})
    return made


@functools.cache
def _one_timeout_pool() -> type[Any]:
    """A cluster node's connection pool whose connections are ``_OneTimeout``: the cluster
    client sets the connection class from the URL (``rediss://``: TLS) over any given to it,
    and hands it to this pool for every node."""
    from redis.connection import Connection, ConnectionPool

    def __init__(self: Any, connection_class: type[Any] = Connection, **kwargs: Any) -> None:
        ConnectionPool.__init__(self, connection_class=_one_timeout(connection_class), **kwargs)

    return type("OneTimeoutConnectionPool", (ConnectionPool,), {"__init__": __init__, "__module__": __name__})


def make_client(url: str, config: StoreConfig, *, asyncio: bool = False) -> Any:
    """A redis-py client for ``url``: ``memory://[name]`` is an in-process fakeredis
    server shared by name; with ``config.cluster`` the URL names any node of a Redis Cluster."""
    if url.startswith("memory://"):
        import fakeredis

        cls = fakeredis.FakeAsyncRedis if asyncio else fakeredis.FakeRedis
        return cls(server=_memory_server(url))
    options = _client_options(config, asyncio=asyncio)
    if config.cluster:
        from redis.cluster import RedisCluster

        return RedisCluster.from_url(url, connection_pool_class=_one_timeout_pool(), **options)
    if asyncio:
        import redis.asyncio as aioredis

        # More operations at once than connections (an endpoint under load) wait for one,
        # within the timeout, instead of failing with "Too many connections".
        pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=100, timeout=config.timeout_seconds, **options)
        return aioredis.Redis.from_pool(pool)  # owns the pool: closing the client closes it
    import redis

    return redis.Redis.from_url(url, **options)


def _response_error() -> type[Exception]:
    from redis.exceptions import ResponseError

    return ResponseError


def _store_error(url: str, exc: BaseException) -> StoreError:
    import redis
    from redis.exceptions import ClusterDownError, MaxConnectionsError

    where, said = redact_url(url), redact_url(error_text(exc))  # never the failed command's arguments
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError, OSError, ClusterDownError, MaxConnectionsError)):
        return StoreUnavailableError(f"Redis store {where} is unreachable: {type(exc).__name__}: {said}")
    hint = ""
    if "MOVED" in said or type(exc).__name__ in {"MovedError", "AskError"}:
        hint = " (the server is a Redis Cluster node: set store.cluster: true)"
    return StoreError(f"Redis store {where} failed: {type(exc).__name__}: {said}{hint}")
