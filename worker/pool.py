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

Slot threads that fail: `execute` never raises for anything a handler does, so an
exception out of `run` (a bug in the runtime, or one raised into the thread from
outside) is settled as a failed attempt by `on_crash` and the thread goes on. A thread
that dies anyway (in the pool's own code) settles its attempt the same way and a fresh
thread takes its place; the dispatcher's deadline check also replaces threads found
dead. A pool with no live slot thread for the jobs it holds claims nothing and hands
them back, so no job waits, leased and `running`, for a slot that will never come.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from jobdesk.worker.executor import Attempt, Kind, Outcome, describe_exception

log = logging.getLogger("jobdesk.worker")

#: How much work (at the measured pace) may wait for a slot: the longest a prefetched
#: job is expected to wait here, and what another process can lose to this one.
PREFETCH_WINDOW_SECONDS = 0.05
#: Most jobs waiting for a slot, however quick the handlers.
PREFETCH_MAX = 1000
#: Weight of each finished attempt in the moving average of durations.
DURATION_WEIGHT = 0.2
#: Jobs waiting while every slot is busy and none started for this long are handed back.
STALL_SECONDS = 2 * PREFETCH_WINDOW_SECONDS


RunT = TypeVar("RunT")
HolderT = TypeVar("HolderT")


class PoolBase(Generic[RunT, HolderT]):
    """What the slot pools share: the attempts waiting for a slot, the running ones and
    what holds each (a thread, an event loop), the moving average of attempt durations,
    and how a failure of the runtime itself settles an attempt. `run` starts one
    attempt; the subclass says how (`SlotPool`: a thread, `AsyncPool`: a task)."""

    #: What runs an attempt, for the logs ("slot thread", "event loop task").
    runner = "slot"

    def __init__(
        self,
        name: str,
        slots: int,
        *,
        run: RunT,
        on_timeout: Callable[[Attempt], None],
        on_free: Callable[[], None],
        on_crash: Callable[[Attempt, BaseException], None] | None = None,
    ) -> None:
        self.name = name
        self.slots = slots
        self._run = run
        self._on_timeout = on_timeout
        self._on_free = on_free
        self._on_crash = on_crash or settle_crashed
        self._lock = threading.Lock()
        self._waiting: deque[Attempt] = deque()
        self._running: dict[Attempt, HolderT] = {}
        self._stopping = False
        #: Whether the dispatcher was woken since it last handed attempts over.
        self._woken = False
        self._mean_duration: float | None = None
        self.abandoned_total = 0
        self._setup()

    def _setup(self) -> None:
        """The subclass's own state (called at the end of `__init__`)."""

    @property
    def busy(self) -> int:
        """Attempts held by this pool: running or waiting for a slot."""
        return len(self._running) + len(self._waiting)

    @property
    def running_count(self) -> int:
        """Attempts a slot has started and not finished."""
        return len(self._running)

    def running(self) -> list[Attempt]:
        with self._lock:
            return list(self._running)

    def earliest_deadline(self) -> float | None:
        """The monotonic hard-timeout deadline due first among running attempts."""
        with self._lock:
            return min((a.deadline for a in self._running), default=None)

    def take_waiting(self) -> list[Attempt]:
        """Every attempt still waiting for a slot (shutdown hands them back)."""
        with self._lock:
            waiting = list(self._waiting)
            self._waiting.clear()
        return waiting

    def _timed_locked(self, seconds: float) -> None:
        mean = self._mean_duration
        self._mean_duration = seconds if mean is None else mean + DURATION_WEIGHT * (seconds - mean)

    def _crashed(self, attempt: Attempt, exc: BaseException) -> None:
        """The runtime failed while running `attempt`: log it, settle it as failed."""
        log.error(
            "slot group %s: job %s: the %s failed running it; the attempt is recorded failed",
            self.name,
            attempt.job.id,
            self.runner,
            exc_info=(type(exc), exc, exc.__traceback__),
            extra={"action": "slot_failed", "job_id": attempt.job.id, "group": self.name},
        )
        try:
            self._on_crash(attempt, exc)
        except BaseException:
            log.exception(
                "job %s: the failed %s's attempt could not be settled",
                attempt.job.id,
                self.runner,
                extra={"action": "slot_failed", "job_id": attempt.job.id},
            )


class _SlotThread(threading.Thread):
    def __init__(self, pool: SlotPool, index: int) -> None:
        super().__init__(name=f"jobdesk-{pool.name}-{index}", daemon=True)
        self.pool = pool
        self.abandoned = False
        self.current: Attempt | None = None

    def run(self) -> None:
        try:
            self.pool._thread_main(self)
        except BaseException as exc:
            self.pool._thread_died(self, exc)


class SlotPool(PoolBase[Callable[[Attempt], None], "_SlotThread"]):
    """Handler threads for one slot group, and the jobs waiting for them."""

    runner = "slot thread"

    def _setup(self) -> None:
        self._ready = threading.Condition(self._lock)
        self._threads: list[_SlotThread] = []
        self._spawned = 0
        self._last_start = 0.0
        self.abandoned_alive = 0

    @property
    def stranded(self) -> bool:
        """Jobs wait here and no slot thread is alive to start them (threads could not
        be started): they go back to the queue."""
        return bool(self._waiting) and not self._threads

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
        """How many jobs the next claim may take: free slots plus the prefetch allowance
        (none while jobs wait here with no live slot thread to start them)."""
        if self._waiting and not self._threads:
            return 0
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
        try:
            thread.start()
        except RuntimeError as exc:  # "can't start new thread": the process is out of them
            self._threads.remove(thread)
            log.error(
                "slot group %s: could not start a slot thread (%s); %d of %d running",
                self.name,
                exc,
                len(self._threads),
                self.slots,
                extra={"action": "slot_thread_not_started", "group": self.name},
            )

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
            except BaseException as exc:
                # execute() never raises for a handler's sake: a bug, or an exception
                # raised into this thread. The job must not stay `running` under a lease
                # the heartbeat keeps renewing: settle it, and this thread goes on.
                self._crashed(attempt, exc)
            if self._done(me, attempt):
                return

    def _thread_died(self, me: _SlotThread, exc: BaseException) -> None:
        """`me` is ending on an exception from the pool's own code: settle the attempt it
        held, give up its slot and start a fresh thread in its place."""
        with self._lock:
            attempt = me.current
            me.current = None
            if me.abandoned:
                if attempt is not None:
                    self.abandoned_alive -= 1  # `_done` did not get to count it
            else:
                if attempt is not None:
                    self._running.pop(attempt, None)
                if me in self._threads:
                    self._threads.remove(me)
                if not self._stopping:
                    self._spawn_missing_locked()
        if attempt is not None:
            self._crashed(attempt, exc)
        else:
            log.error(
                "slot group %s: a slot thread failed; a fresh one takes its place",
                self.name,
                exc_info=(type(exc), exc, exc.__traceback__),
                extra={"action": "slot_failed", "group": self.name},
            )
        try:
            self._on_free()
        except BaseException:
            log.exception("slot group %s: waking the dispatcher failed", self.name)

    def _replace_dead_locked(self) -> list[Attempt]:
        """Slot threads that are gone without saying so (their `run` never got to
        `_thread_died`): drop them, start fresh ones; returns the attempts they held."""
        lost: list[Attempt] = []
        for thread in [t for t in self._threads if t.ident is not None and not t.is_alive()]:
            self._threads.remove(thread)
            attempt = thread.current
            thread.current = None
            if attempt is not None and self._running.pop(attempt, None) is not None:
                lost.append(attempt)
        if not self._stopping and len(self._threads) < min(self.slots, self.busy):
            self._spawn_missing_locked()
        return lost

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

    def take_excess(self, now: float | None = None) -> list[Attempt]:
        """Waiting attempts beyond what the slots will start soon, newest first: for the
        runner to hand back to the queue. All of them when no slot thread is alive."""
        with self._lock:
            # Twice the allowance: a moving average that wobbles must not hand jobs back
            # and claim them again.
            keep = self.slots - len(self._running) + 2 * self.prefetch(now)
            if not self._threads:
                keep = 0
            return [self._waiting.pop() for _ in range(len(self._waiting) - keep)]

    def check_deadlines(self, now: float | None = None) -> float:
        """Time out overrunning attempts; returns seconds until the next deadline."""
        now = time.monotonic() if now is None else now
        expired: list[Attempt] = []
        next_deadline = float("inf")
        with self._lock:
            lost = self._replace_dead_locked() if self._threads or self._waiting else []
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
        for attempt in lost:
            self._crashed(attempt, RuntimeError("the slot thread running it is gone"))
        for attempt in expired:
            self._on_timeout(attempt)
        if expired or lost:
            self._on_free()
        return next_deadline - now

    def stop(self) -> None:
        """Let idle threads exit (busy ones finish their attempt first, then whatever is
        still waiting — the runner has handed that back already)."""
        with self._lock:
            self._stopping = True
            self._ready.notify_all()


def settle_crashed(attempt: Attempt, exc: BaseException) -> None:
    """Settle the attempt of a slot thread that failed as a failed attempt naming why
    (what `on_crash` does when the pool's owner has nothing to add)."""
    attempt.settle(crashed_outcome(attempt, exc))


def crashed_outcome(attempt: Attempt, exc: BaseException) -> Outcome:
    elapsed = time.monotonic() - attempt.started if attempt.started else 0.0
    return Outcome(
        attempt.job,
        Kind.FAILED,
        error=f"SlotFailed: the worker's slot thread failed while running this attempt: "
        f"{describe_exception(exc)}",
        duration=elapsed,
    )
