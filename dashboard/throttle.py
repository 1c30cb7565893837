"""Login rate limiting: failed attempts per (client address, username) and per address,
counted in a sliding window in this process.

Each gunicorn worker process counts on its own, so the effective limit is the per-key
limit times the number of worker processes; a reverse proxy in front should add its
own limit for internet-facing deployments (see docs/dashboard.md).
"""

from __future__ import annotations

import threading
import time
from collections import deque

MAX_FAILURES_PER_USER = 5
MAX_FAILURES_PER_ADDRESS = 20
WINDOW_SECONDS = 15 * 60
MAX_TRACKED_KEYS = 10_000


class LoginThrottle:
    def __init__(
        self,
        per_user: int = MAX_FAILURES_PER_USER,
        per_address: int = MAX_FAILURES_PER_ADDRESS,
        window_seconds: float = WINDOW_SECONDS,
    ) -> None:
        self.per_user = per_user
        self.per_address = per_address
        self.window = window_seconds
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, key: str, now: float) -> deque[float]:
        entries = self._failures.get(key)
        if entries is None:
            return deque()
        while entries and entries[0] <= now - self.window:
            entries.popleft()
        if not entries:
            del self._failures[key]
        return entries

    def retry_after(self, address: str, username: str) -> float:
        """Seconds until another attempt is allowed (0 when allowed now)."""
        now = time.monotonic()
        with self._lock:
            waits = []
            for key, limit in (
                (f"u:{address}:{username}", self.per_user),
                (f"a:{address}", self.per_address),
            ):
                entries = self._recent(key, now)
                if len(entries) >= limit:
                    waits.append(entries[0] + self.window - now)
            return max(waits, default=0.0)

    def failed(self, address: str, username: str) -> None:
        now = time.monotonic()
        with self._lock:
            if len(self._failures) > MAX_TRACKED_KEYS:
                # Bounded memory under a spray of usernames: forget the oldest keys.
                for key in list(self._failures)[: MAX_TRACKED_KEYS // 10]:
                    del self._failures[key]
            for key in (f"u:{address}:{username}", f"a:{address}"):
                self._failures.setdefault(key, deque()).append(now)

    def succeeded(self, address: str, username: str) -> None:
        with self._lock:
            self._failures.pop(f"u:{address}:{username}", None)
