"""A thread-safe LRU cache bounded by the weight of its values (bytes), whose misses are computed once, even
when several threads ask at the same time."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Generic, TypeVar

import attrs

V = TypeVar("V")


@attrs.define
class CacheStats:
    """Counters of a :class:`LRUCache`: lookups served from the cache, computed, and entries evicted; and the
    weight (bytes) of what it holds now."""

    hits: int = 0
    misses: int = 0
    evictions: int = 0
    weight: int = 0


class LRUCache(Generic[V]):
    """Keeps the most recently used values whose weights (``weigh(value)``, bytes) add up to at most
    ``capacity``; a value heavier than ``capacity`` is not kept, and ``capacity`` 0 keeps none.

    :meth:`get_or_compute` computes a missing value in the calling thread; another thread asking for
    the same key meanwhile waits for that result instead of computing it again (and counts a hit).
    An exception from the computation reaches every waiter and nothing is cached.
    """

    def __init__(self, capacity: int, weigh: Callable[[V], int]) -> None:
        if capacity < 0:
            raise ValueError(f"cache capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        self.weigh = weigh
        self.stats = CacheStats()
        self._values: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._pending: dict[Hashable, Future[V]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._values)

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._values

    def keys(self) -> list[Hashable]:
        """Cached keys, least recently used first."""
        with self._lock:
            return list(self._values)

    def get_or_compute(self, key: Hashable, compute: Callable[[], V]) -> tuple[V, bool]:
        """``(value, hit)``: the cached value of ``key`` (now most recently used), or ``compute()``'s."""
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                self.stats.hits += 1
                return self._values[key][0], True
            pending = self._pending.get(key)
            if pending is None:
                future: Future[V] = Future()
                self._pending[key] = future
                self.stats.misses += 1
            else:
                self.stats.hits += 1
        if pending is not None:
            return pending.result(), True
        try:
            value = compute()
            weight = self.weigh(value)
        except BaseException as exc:
            with self._lock:
                del self._pending[key]
            future.set_exception(exc)
            raise
        with self._lock:
            del self._pending[key]
            self._store(key, value, weight)
        future.set_result(value)
        return value, False

    def _store(self, key: Hashable, value: V, weight: int) -> None:
        if weight > self.capacity:
            return
        self._values[key] = (value, weight)
        self.stats.weight += weight
        while self.stats.weight > self.capacity:
            _, (_, dropped) = self._values.popitem(last=False)
            self.stats.weight -= dropped
            self.stats.evictions += 1
