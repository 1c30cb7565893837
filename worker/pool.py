"""The slots of one slot group: handler threads, the hard timeout, stuck threads.

Each group has `slots` handler threads (started on demand) that take attempts from one
queue in claim order. A slot is busy from hand-over until its handler returns — or until
the attempt's hard timeout, whichever comes first.

Stuck threads: Python cannot kill a thread, so when an attempt overruns its timeout the
runner settles it as `timeout`, the slot is freed and a fresh thread takes the slot's
place; the old thread is *abandoned* (its `ctx.cancelled` is set so a cooperative
handler can stop) and counted while it stays alive. Whatever it returns later is
ignored — its attempt is already settled and its lease token is spent. When more than
`max_stuck_threads` abandoned threads are alive at once the runner stops the process
cleanly with a non-zero status so the supervisor starts a fresh one.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from jobdesk.worker.executor import Attempt


class _SlotThread(threading.Thread):
    def __init__(self, pool: SlotPool, index: int) -> None:
        super().__init__(name=f"jobdesk-{pool.name}-{index}", daemon=True)
        self.pool = pool
        self.abandoned = False
        self.current: Attempt | None = None

    def run(self) -> None:
        self.pool._thread_main(self)


class SlotPool:
    """Handler threads for one slot group."""

    def __init__(
        self,
        name: str,
        slots: int,
        *,
        run: Callable[[Attempt], None],
        on_timeout: Callable[[Attempt], None],
        on_free: Callable[[], None],
    ) -> None:
        self.name = name
        self.slots = slots
        self._run = run
        self._on_timeout = on_timeout
        self._on_free = on_free
        self._inbox: queue.SimpleQueue[Attempt | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._busy = 0
        self._threads: list[_SlotThread] = []
        self._spawned = 0
        self._running: dict[Attempt, _SlotThread] = {}
        self.abandoned_alive = 0
        self.abandoned_total = 0
        #: Free slots worth waking the dispatcher for (it claims in batches).
        self.wake_threshold = max(1, slots // 4)

    @property
    def busy(self) -> int:
        return self._busy

    def free(self) -> int:
        return self.slots - self._busy

    def submit(self, attempts: list[Attempt]) -> None:
        """Hand claimed attempts to the slots (the caller claimed at most `free()`)."""
        with self._lock:
            self._busy += len(attempts)
            missing = min(self.slots, self._busy) - len(self._threads)
            for _ in range(max(0, missing)):
                self._spawn_locked()
        for attempt in attempts:
            self._inbox.put(attempt)

    def _spawn_locked(self) -> None:
        self._spawned += 1
        thread = _SlotThread(self, self._spawned)
        self._threads.append(thread)
        thread.start()

    def _thread_main(self, me: _SlotThread) -> None:
        while True:
            attempt = self._inbox.get()
            if attempt is None:
                return
            if attempt.settled:  # released at shutdown before it started
                self._done(me, attempt)
                continue
            with self._lock:
                attempt.begin()
                me.current = attempt
                self._running[attempt] = me
            try:
                self._run(attempt)
            except BaseException:
                # execute() never raises; this is a bug. Keep the slot accounting right.
                self._done(me, attempt)
                raise
            if self._done(me, attempt):
                return

    def _done(self, me: _SlotThread, attempt: Attempt) -> bool:
        """Free the slot after the handler returned; True when this thread must exit."""
        with self._lock:
            me.current = None
            if me.abandoned:
                self.abandoned_alive -= 1
                return True
            self._running.pop(attempt, None)
            self._busy -= 1
            wake = self._busy == 0 or self.slots - self._busy == self.wake_threshold
        if wake:
            self._on_free()
        return False

    def check_deadlines(self, now: float | None = None) -> float:
        """Time out overrunning attempts; returns seconds until the next deadline."""
        now = time.monotonic() if now is None else now
        expired: list[Attempt] = []
        next_deadline = float("inf")
        with self._lock:
            for attempt, thread in list(self._running.items()):
                if attempt.deadline <= now:
                    expired.append(attempt)
                    del self._running[attempt]
                    thread.abandoned = True
                    self._threads.remove(thread)
                    self.abandoned_alive += 1
                    self.abandoned_total += 1
                    self._busy -= 1
                else:
                    next_deadline = min(next_deadline, attempt.deadline)
        for attempt in expired:
            self._on_timeout(attempt)
        if expired:
            self._on_free()
        return next_deadline - now

    def running(self) -> list[Attempt]:
        with self._lock:
            return list(self._running)

    def earliest_deadline(self) -> float | None:
        """The monotonic hard-timeout deadline due first among running attempts."""
        with self._lock:
            return min((a.deadline for a in self._running), default=None)

    def stop(self) -> None:
        """Let idle threads exit (busy ones finish their attempt first)."""
        with self._lock:
            count = len(self._threads)
        for _ in range(count):
            self._inbox.put(None)
