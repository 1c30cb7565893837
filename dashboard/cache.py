"""A tiny single-flight time-to-live cache for expensive read-only aggregates.

On SQLite the overview's counts scan an index entry per job; on PostgreSQL they are a
few hundred rows of `jobdesk_job_counts`, but still several statements. Every open
overview polls every few seconds, so without a cache N operators cost N computations per
interval; with it each dashboard process computes the aggregate at most once per TTL,
and concurrent requests wait for that one computation instead of starting their own.
The page shows the time the numbers are from.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class TTLCache(Generic[T]):
    def __init__(self, ttl_seconds: float) -> None:
        self.ttl = ttl_seconds
        self._value: T | None = None
        self._stored_at = 0.0
        self._lock = threading.Lock()

    def get(self, compute: Callable[[], T]) -> T:
        if self.ttl <= 0:
            return compute()
        with self._lock:
            if self._value is None or time.monotonic() - self._stored_at >= self.ttl:
                self._value = compute()
                self._stored_at = time.monotonic()
            return self._value

    def clear(self) -> None:
        with self._lock:
            self._value = None
