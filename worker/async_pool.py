"""The event loop of one slot group: `async def` handlers, many in flight at once.

The `SlotPool` of coroutine handlers. Its slots are tasks on one event loop running in
a thread of its own (started with the first job), `JOBDESK_ASYNC_CONCURRENCY` of them
at once (default 200): a handler that awaits the network most of the time holds no
thread while it waits. The dispatcher treats it like the thread pool — `free()` slots
are claimed for, `submit` hands attempts over, `check_deadlines` enforces timeouts —
and nothing about leases, cancel requests, outcomes or shutdown differs.

Timeouts and hard stops: at an attempt's deadline (its timeout, or the end of the grace
after a cancel request) the dispatcher settles it and cancels its task; the slot is free
at once. A coroutine that swallows the cancellation and goes on is left to finish on its
own (its result is ignored) and counted as stuck while it runs. A handler that blocks
the loop (a blocking call inside `async def`) stalls every coroutine on it: once an
overdue task has not ended `HARD_STOP_SECONDS` after its cancellation and the loop has
not turned for as long, the loop is *abandoned* — a fresh loop in a fresh thread takes
the waiting jobs, the old thread is counted as stuck (like an abandoned slot thread, see
`jobdesk.worker.pool`) until its tasks end, and the attempts still on it are settled at
their deadlines like any other.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from jobdesk.worker.config import ASYNC_BLOCKING_THREADS
from jobdesk.worker.executor import Attempt
from jobdesk.worker.loop_resources import close_loop_resources
from jobdesk.worker.pool import PoolBase

log = logging.getLogger("jobdesk.worker")

#: How often the loop marks that it turns (what tells a blocked loop from a busy one).
TICK_SECONDS = 0.1
#: An overdue task still running this long after its cancellation, on a loop that has
#: not turned for as long, means the loop is blocked: it is replaced.
HARD_STOP_SECONDS = 2.0
#: At shutdown, how long tasks still running get to end after their cancellation.
CLOSE_SECONDS = 1.0


class _Loop:
    """One event loop in a daemon thread, and the tasks it runs."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        # A known number of threads for `asyncio.to_thread` (the handler database pool is
        # sized for them), not one that follows the CPU count.
        self.loop.set_default_executor(
            ThreadPoolExecutor(ASYNC_BLOCKING_THREADS, thread_name_prefix=f"{name}-blocking")
        )
        self.tasks: dict[Attempt, asyncio.Task[None]] = {}
        self.turned = time.monotonic()
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def call(self, fn: Callable[..., object], *args: object) -> bool:
        """`fn(*args)` on the loop, from any thread; False when the loop is closed."""
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # closed
            return False
        return True

    def blocked(self, now: float) -> bool:
        return now - self.turned > HARD_STOP_SECONDS

    def _turn(self) -> None:
        self.turned = time.monotonic()
        self.loop.call_later(TICK_SECONDS, self._turn)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._turn)
        try:
            self.loop.run_forever()
            pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.wait(pending, timeout=CLOSE_SECONDS))
            self.loop.run_until_complete(close_loop_resources())
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.run_until_complete(self.loop.shutdown_default_executor())
        finally:
            with contextlib.suppress(RuntimeError):  # a task that would not end
                self.loop.close()


class AsyncPool(PoolBase[Callable[[Attempt], Awaitable[None]], "_Loop"]):
    """Coroutine handlers for one slot group, on one event loop (see the module)."""

    runner = "event loop task"

    def _setup(self) -> None:
        #: Settled at their deadline, task cancelled, not ended yet: attempt → (loop, when).
        self._overdue: dict[Attempt, tuple[_Loop, float]] = {}
        self._loop: _Loop | None = None
        self._abandoned: list[_Loop] = []
        self._loops = 0

    # ------------------------------------------------------------- what the runner reads
    @property
    def stranded(self) -> bool:
        """Jobs wait and the loop that would start them is gone."""
        loop = self._loop
        return bool(self._waiting) and loop is not None and not loop.thread.is_alive()

    @property
    def abandoned_alive(self) -> int:
        """Stuck past their timeout: loops abandoned while blocked, and tasks that
        ignored their cancellation for `HARD_STOP_SECONDS`."""
        now = time.monotonic()
        with self._lock:
            loops = sum(1 for loop in self._abandoned if loop.thread.is_alive())
            tasks = sum(
                1
                for loop, since in self._overdue.values()
                if loop is self._loop and now - since > HARD_STOP_SECONDS
            )
        return loops + tasks

    def prefetch(self, now: float | None = None) -> int:
        """No prefetch: a claim fills free tasks, of which there are many."""
        return 0

    def free(self) -> int:
        return 0 if self.stranded else self.slots - self.busy

    @property
    def wake_threshold(self) -> int:
        return max(1, self.slots // 4)

    # ------------------------------------------------------------- handing work over
    def submit(self, attempts: list[Attempt]) -> None:
        with self._lock:
            self._woken = False
            self._waiting.extend(attempts)
            loop = self._current_loop_locked()
        if loop is not None:
            loop.call(self._start_waiting, loop)

    def _current_loop_locked(self) -> _Loop | None:
        if self._loop is None and not self._stopping:
            self._loops += 1
            loop = _Loop(f"jobdesk-{self.name}-loop-{self._loops}")
            try:
                loop.start()
            except RuntimeError as exc:  # "can't start new thread"
                log.error(
                    "slot group %s: could not start the event loop thread (%s)",
                    self.name,
                    exc,
                    extra={"action": "slot_thread_not_started", "group": self.name},
                )
                loop.loop.close()
                return None
            self._loop = loop
        return self._loop

    def _start_waiting(self, loop: _Loop) -> None:
        """On `loop`: start waiting attempts while tasks are free."""
        started: list[Attempt] = []
        with self._lock:
            if loop is not self._loop:
                return  # abandoned: new work goes to the fresh loop
            while self._waiting and len(self._running) < self.slots:
                attempt = self._waiting.popleft()
                if attempt.begin():  # False: settled while it waited (lease lost)
                    self._running[attempt] = loop
                    started.append(attempt)
        for attempt in started:
            task = loop.loop.create_task(self._main(attempt))
            loop.tasks[attempt] = task
            # A callback, not a `finally`: a task cancelled before its first step never
            # runs its body.
            task.add_done_callback(functools.partial(self._task_ended, attempt, loop))

    def _task_ended(self, attempt: Attempt, loop: _Loop, _task: asyncio.Task[None]) -> None:
        self._done(attempt, loop)

    async def _main(self, attempt: Attempt) -> None:
        try:
            await self._run(attempt)
        except BaseException as exc:
            # `execute_async` never raises for a handler's sake: a bug in the runtime.
            self._crashed(attempt, exc)

    def _done(self, attempt: Attempt, loop: _Loop) -> None:
        """On `loop`: the task ended; free its slot and start the next waiting attempt."""
        with self._lock:
            loop.tasks.pop(attempt, None)
            overdue = self._overdue.pop(attempt, None) is not None
            if self._running.pop(attempt, None) is not None and attempt.outcome is not None:
                self._timed_locked(attempt.outcome.duration)
            if loop is not self._loop and not loop.tasks:
                loop.loop.stop()  # an abandoned loop whose last task ended
            wake = not overdue and (
                not self.busy or (not self._woken and self.free() >= self.wake_threshold)
            )
            if wake:
                self._woken = True
        self._start_waiting(loop)
        if wake:
            self._on_free()

    # ------------------------------------------------------------- deadlines, shutdown
    def check_deadlines(self, now: float | None = None) -> float:
        """Settle and cancel overrunning attempts, replace a blocked loop; returns the
        seconds until the next deadline."""
        now = time.monotonic() if now is None else now
        expired: list[tuple[Attempt, _Loop]] = []
        next_deadline = float("inf")
        fresh: _Loop | None = None
        with self._lock:
            for attempt, loop in list(self._running.items()):
                if attempt.deadline <= now:
                    expired.append((attempt, loop))
                    del self._running[attempt]
                    self._overdue[attempt] = (loop, now)
                    self.abandoned_total += 1
                    self._timed_locked(attempt.timeout)
                else:
                    next_deadline = min(next_deadline, attempt.deadline)
            if self._loop_is_blocked_locked(now):
                fresh = self._replace_loop_locked()
            if self._overdue:
                next_deadline = min(next_deadline, now + TICK_SECONDS * 5)
        for attempt, _loop in expired:
            self._on_timeout(attempt)
        for attempt, loop in expired:
            task = loop.tasks.get(attempt)
            if task is not None:
                loop.call(task.cancel)
        if fresh is not None:
            fresh.call(self._start_waiting, fresh)
        if expired or fresh is not None:
            self._on_free()
        return next_deadline - now

    def _loop_is_blocked_locked(self, now: float) -> bool:
        loop = self._loop
        if loop is None or not loop.blocked(now):
            return False
        return any(
            on is loop and now - since > HARD_STOP_SECONDS for on, since in self._overdue.values()
        )

    def _replace_loop_locked(self) -> _Loop | None:
        old = self._loop
        assert old is not None
        self._abandoned.append(old)
        self._abandoned = [loop for loop in self._abandoned if loop.thread.is_alive()]
        self._loop = None
        log.error(
            "slot group %s: the event loop is blocked (a handler made a blocking call in "
            "async def?) %.1fs past an overdue job's cancellation; its thread is "
            "abandoned and a fresh loop takes the waiting jobs",
            self.name,
            time.monotonic() - old.turned,
            extra={"action": "event_loop_blocked", "group": self.name},
        )
        # Its other tasks go on if it ever turns again; it stops after the last one.
        return self._current_loop_locked()

    def take_excess(self, now: float | None = None) -> list[Attempt]:
        """Waiting attempts beyond the free tasks (none normally: no prefetch); all of
        them when the loop is gone."""
        with self._lock:
            keep = 0 if self.stranded else max(0, self.slots - len(self._running))
            return [self._waiting.pop() for _ in range(len(self._waiting) - keep)]

    def stop(self) -> None:
        """Stop the loops: tasks still running (their jobs were released) are cancelled."""
        with self._lock:
            self._stopping = True
            loops = [loop for loop in (self._loop, *self._abandoned) if loop is not None]
        for loop in loops:
            loop.call(loop.loop.stop)
