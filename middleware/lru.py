"""A small thread-safe LRU map, for the per-process caches keyed by session id."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Lru"]

_V = TypeVar("_V")


class Lru(Generic[_V]):
    """At most ``size`` entries; the least recently used goes first, handed to ``evicted``
    when given (called with the lock held: it must not use this map)."""

    def __init__(self, size: int = 10_000, evicted: Callable[[_V], None] | None = None) -> None:
        self._items: OrderedDict[str, _V] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()
        self._evicted = evicted

    def get(self, key: str) -> _V | None:
        with self._lock:
            return self._items.get(key)

    def put(self, key: str, value: _V) -> None:
        with self._lock:
            self._items[key] = value
            self._touch(key)

    def add(self, key: str, value: _V) -> bool:
        """Put ``value`` under ``key`` unless it holds one already (then nothing changes):
        whether it was added, in one step for every thread."""
        with self._lock:
            if key in self._items:
                return False
            self._items[key] = value
            self._touch(key)
            return True

    def swap(self, key: str, value: _V) -> _V | None:
        """Put ``value`` under ``key`` and give what it held (None: nothing), in one step for
        every thread."""
        with self._lock:
            old = self._items.get(key)
            self._items[key] = value
            self._touch(key)
            return old

    def pop(self, key: str) -> _V | None:
        with self._lock:
            return self._items.pop(key, None)

    def forget(self, key: str) -> None:
        self.pop(key)

    def _touch(self, key: str) -> None:
        """Mark ``key`` most recent and evict past the size (call with the lock held)."""
        self._items.move_to_end(key)
        while len(self._items) > self._size:
            _, value = self._items.popitem(last=False)
            if self._evicted is not None:
                self._evicted(value)
