"""The slots of one slot group: handler threads, the claimed jobs waiting for a slot,
the hard timeout, stuck threads.

Each group has `slots` handler threads (started on demand) that take attempts in claim
order. A slot is busy from the moment its thread starts an attempt until the handler
returns — or until the attempt's hard timeout, whichever comes first.

Prefetch: a claim costs one round trip whether it takes 1 job or 100, so a group whose
handlers are quick claims more than its free slots and the rest wait here — leased,
`running` in the database, their leases renewed by the heartbeat like any held job —
until a slot takes them. How many may wait is bounded in time as well as in count:
what the slots are expected to start within `PREFETCH_WINDOW_SECONDS` at the pace
measured so far (a moving average of attempt durations), at most `PREFETCH_MAX`, and
nothing until the first attempts have been timed. With 10 slots, handlers averaging
0.5 s or more get no prefetch; 5 ms ones get 100 waiting jobs, 50 ms of work; no-op
jobs reach `PREFETCH_MAX` (a cap of 200 left the dispatcher waiting for room between
claims: raising it to 1,000 gave 13-17 % more jobs/s in alternating rounds). Jobs
waiting past that bound — the handlers turned slow, or no slot started anything for
`STALL_SECONDS` — are handed back (`take_excess`) so another process can start them
now; at shutdown every waiting job is handed back at once (`take_waiting`).

Stuck threads: Python cannot kill a thread, so when an attempt overruns its timeout the
runner settles it as `timeout`, the slot is freed and a fresh thread takes the slot's
place; the old thread is *abandoned* (its `ctx.cancelled` is set so a cooperative
handler can stop) and counted while it stays alive. Whatever it returns later is
ignored — its attempt is already settled and its lease token is spent. When more than
`max_stuck_threads` abandoned threads are alive at once the runner stops the process
cleanly with a non-zero status so the supervisor starts a fresh one.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from jobdesk.worker.executor import Attempt

#: How much work (at the measured pace) may wait for a slot: the longest a prefetched
#: job is expected to wait here, and what another process can lose to this one.
PREFETCH_WINDOW_SECONDS = 0.05
#: Most jobs waiting for a slot, however quick the handlers.
PREFETCH_MAX = 1000
#: Weight of each finished attempt in the moving average of durations.
DURATION_WEIGHT = 0.2
#: Jobs waiting while every slot is busy and none started for this long are handed back.
STALL_SECONDS = 2 * PREFETCH_WINDOW_SECONDS


class _SlotThread(threading.Thread):
    def __init__(self, pool: SlotPool, index: int) -> None:
        super().__init__(name=f"jobdesk-{pool.name}-{index}", daemon=True)
        self.pool = pool
        self.abandoned = False
        self.current: Attempt | None = None

    def run(self) -> None:
        self.pool._thread_main(self)


class SlotPool:
    """Handler threads for one slot group, and the jobs waiting for them."""

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
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._waiting: deque[Attempt] = deque()
        self._stopping = False
        self._threads: list[_SlotThread] = []
        self._spawned = 0
        self._running: dict[Attempt, _SlotThread] = {}
        self._mean_duration: float | None = None
        self._last_start = 0.0
        #: Whether the dispatcher was woken since it last handed attempts over.
        self._woken = False
        self.abandoned_alive = 0
        self.abandoned_total = 0

    @property
    def busy(self) -> int:
        """Attempts held by this pool: running or waiting for a slot."""
        return len(self._running) + len(self._waiting)

    @property
    def running_count(self) -> int:
        """Attempts a slot has started and not finished."""
        return len(self._running)

    def prefetch(self, now: float | None = None) -> int:
        """How many claimed jobs may wait for a slot now (see the module docstring)."""
        mean = self._mean_duration
        if mean is None or self._stalled(now):
            return 0
        return min(PREFETCH_MAX, int(self.slots * PREFETCH_WINDOW_SECONDS / max(mean, 1e-6)))

    def _stalled(self, now: float | None) -> bool:
        """Every slot busy and none started an attempt for `STALL_SECONDS`: the handlers
        just turned slow, before the moving average could tell."""
        if len(self._running) < self.slots:
            return False
        now = time.monotonic() if now is None else now
        return now - self._last_start > STALL_SECONDS

    def free(self) -> int:
        """How many jobs the next claim may take: free slots plus the prefetch allowance."""
        return self.slots + self.prefetch() - self.busy

    @property
    def wake_threshold(self) -> int:
        """Room worth a claim: a quarter of the slots, and half the prefetch allowance
        (the other half keeps the slots fed while that claim is on its way)."""
        return max(1, self.slots // 4) + self.prefetch() // 2

    def submit(self, attempts: list[Attempt]) -> None:
        """Hand claimed attempts to the slots (the caller claimed at most `free()`)."""
        with self._lock:
            self._woken = False
            self._waiting.extend(attempts)
            self._spawn_missing_locked()
            self._ready.notify(len(attempts))

    def _spawn_missing_locked(self) -> None:
        """Start threads up to one per held attempt, at most one per slot."""
        for _ in range(min(self.slots, self.busy) - len(self._threads)):
            self._spawn_locked()

    def _spawn_locked(self) -> None:
        self._spawned += 1
        thread = _SlotThread(self, self._spawned)
        self._threads.append(thread)
        thread.start()

    def _next(self, me: _SlotThread) -> Attempt | None:
        """The next attempt this thread starts (None: the pool is stopping)."""
        with self._lock:
            while True:
                while not self._waiting:
                    if self._stopping:
                        self._threads.remove(me)
                        return None
                    self._ready.wait()
                attempt = self._waiting.popleft()
                if attempt.begin():
                    me.current = attempt
                    self._running[attempt] = me
                    self._last_start = attempt.started
                    return attempt
                # Settled before it started (its lease was lost): nothing to run.

    def _thread_main(self, me: _SlotThread) -> None:
        while True:
            attempt = self._next(me)
            if attempt is None:
                return
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
            outcome = attempt.outcome
            if outcome is not None:
                self._timed_locked(outcome.duration)
            wake = not self.busy or (not self._woken and self.free() >= self.wake_threshold)
            if wake:
                self._woken = True
        if wake:
            self._on_free()
        return False

    def _timed_locked(self, seconds: float) -> None:
        mean = self._mean_duration
        self._mean_duration = seconds if mean is None else mean + DURATION_WEIGHT * (seconds - mean)

    def take_excess(self, now: float | None = None) -> list[Attempt]:
        """Waiting attempts beyond what the slots will start soon, newest first: for the
        runner to hand back to the queue."""
        with self._lock:
            # Twice the allowance: a moving average that wobbles must not hand jobs back
            # and claim them again.
            keep = self.slots - len(self._running) + 2 * self.prefetch(now)
            return [self._waiting.pop() for _ in range(len(self._waiting) - keep)]

    def take_waiting(self) -> list[Attempt]:
        """Every attempt still waiting for a slot (shutdown hands them back)."""
        with self._lock:
            waiting = list(self._waiting)
            self._waiting.clear()
        return waiting

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
                    self._timed_locked(attempt.timeout)
                else:
                    next_deadline = min(next_deadline, attempt.deadline)
            if expired:
                # Fresh threads take the abandoned ones' place for the jobs still waiting.
                self._spawn_missing_locked()
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
        """Let idle threads exit (busy ones finish their attempt first, then whatever is
        still waiting — the runner has handed that back already)."""
        with self._lock:
            self._stopping = True
            self._ready.notify_all()
