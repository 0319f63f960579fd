"""The session store: key layout, every store operation as a plan, and the drivers that
send a plan's command batches to Redis (the only modules that talk to it)."""

from __future__ import annotations

from .drivers import AsyncRedisStore, AsyncSessionStore, RedisStore, SessionStore, ThreadedStore, make_client

__all__ = ["AsyncRedisStore", "AsyncSessionStore", "RedisStore", "SessionStore", "ThreadedStore", "make_client"]
