"""The freeze watchdog: a worker process whose Python code has stopped running exits.

A handler that holds the GIL (a pure-C loop such as `sum(range(10**13))`, a regular
expression that backtracks for minutes, a C extension that never releases it) freezes
the whole process: no heartbeat, no hard timeout, no signal handler can run, because
all of them are Python code. Nothing written in Python can notice.

`faulthandler`'s timer can: it is a C thread that waits on its own lock, not on the
GIL. A small Python thread re-arms it every second (and a slot thread when an attempt
begins that would fall due sooner), each time for as long as the
process may go without running Python: until the hard timeout of the attempt due first
plus a grace, and never more than the limit (`JOBDESK_WATCHDOG_SECONDS`). While the
process runs Python at all, the timer never fires. When nothing re-armed it in time,
the C thread prints `Timeout (h:mm:ss)!` and every Python thread's stack (the frozen
handler's among them) to stderr and ends the process with exit status 1, so its
supervisor restarts it. The timer fires `WITNESS_SECONDS` after the moment the watchdog
gives up: in between, the watchdog's witness (`jobdesk.worker.witness`, a companion
process) records the running attempts as lost, naming the watchdog and how long past its
timeout the handler held the interpreter, and the jobs go on like after any other
crash: retried, and `dead` once their attempts are spent. Without a witness the lease
expires (no heartbeat renews it) and the reaper records the attempt as lost.

The timer is one per process (faulthandler has a single one), so only the process
that owns its life — `jobdesk worker` — gives its Runner a watchdog; a Runner embedded
in a test or an app has none.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TextIO

from jobdesk.worker.witness import WITNESS_SECONDS, RunningAttempt, Witness

log = logging.getLogger("jobdesk.worker")

#: Exit status faulthandler's timer ends the process with.
FROZEN_EXIT_STATUS = 1
#: How long past a running attempt's hard timeout a frozen process is given (the
#: runner, when it can run, abandons an overrunning attempt within 50 ms).
GRACE_SECONDS = 5.0
#: The timer is never armed for less: the re-arming thread must get the GIL once in
#: this long, which any process that runs Python at all does many times over.
MIN_LIMIT_SECONDS = 5.0
#: The timer is re-armed this often.
REARM_SECONDS = 1.0
#: The shortest default limit. A process stopped from outside (SIGSTOP, a paused VM)
#: looks frozen too: when it resumes after longer than the limit the timer fires at
#: once. A minute keeps short pauses — which fencing already makes harmless — alive.
MIN_DEFAULT_LIMIT = 60.0


def default_limit(lease_seconds: float) -> float:
    """Two leases (by then the jobs this process held belong to other workers), and at
    least a minute."""
    return max(MIN_DEFAULT_LIMIT, 2 * lease_seconds)


def limit_at(now: float, earliest_deadline: float | None, limit: float) -> float:
    """How long the process may go without running Python from `now` on: until the
    earliest running attempt's hard timeout plus the grace, never more than `limit`
    (a frozen process has lost its leases by then) nor less than the floor."""
    if earliest_deadline is not None:
        limit = min(limit, earliest_deadline - now + GRACE_SECONDS)
    return max(MIN_LIMIT_SECONDS, limit)


class FreezeWatchdog:
    """Keeps faulthandler's timer armed while the runner runs.

    Armed every second by its own thread, and by a slot thread when an attempt begins
    whose timeout would fall due before the armed time (the handler may take the GIL
    before the next second; re-arming starts a C thread, so only then)."""

    def __init__(
        self, limit_seconds: float, stream: TextIO | None = None, witness: Witness | None = None
    ) -> None:
        self.limit_seconds = limit_seconds
        self._stream = stream if stream is not None else sys.stderr
        self._lock = threading.Lock()
        self._fires_at = float("inf")  # monotonic moment it gives up; inf: not armed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._earliest_deadline: Callable[[], float | None] = lambda: None
        self._running: Callable[[], tuple[str, list[RunningAttempt]]] = lambda: ("?", [])
        self.witness = witness
        self._witnessed = False

    def prepare(self) -> None:
        """Start the witness: before the worker starts any thread (it is forked)."""
        if self.usable and self.witness is not None and not self._witnessed:
            self._witnessed = self.witness.start()

    @property
    def usable(self) -> bool:
        """A limit of 0 turns it off; a stderr without a descriptor cannot take the dump."""
        return self.limit_seconds > 0 and _has_fileno(self._stream)

    def start(
        self,
        earliest_deadline: Callable[[], float | None],
        running: Callable[[], tuple[str, list[RunningAttempt]]] | None = None,
    ) -> bool:
        """Arm the timer and keep it armed; returns whether it is armed.

        `earliest_deadline` gives the monotonic hard-timeout deadline of the attempt due
        first among those running, or None; `running` the worker's id and its running
        attempts, for the witness."""
        if not self.usable:
            return False
        self._earliest_deadline = earliest_deadline
        if running is not None:
            self._running = running
        self._stop.clear()
        self.rearm()
        self._thread = threading.Thread(target=self._loop, name="jobdesk-watchdog", daemon=True)
        self._thread.start()
        log.info(
            "watchdog armed: a handler that keeps this process from running Python (holding "
            "the GIL) %gs past its timeout, or for %gs in all, makes it print every "
            "thread's stack and exit %d",
            GRACE_SECONDS,
            self.limit_seconds,
            FROZEN_EXIT_STATUS,
            extra={"action": "watchdog_armed", "limit_seconds": self.limit_seconds},
        )
        return True

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        with self._lock:
            faulthandler.cancel_dump_traceback_later()
            self._fires_at = float("inf")
        if self.witness is not None and self._witnessed:
            self.witness.close()
            self._witnessed = False

    def rearm(self) -> None:
        """Start the countdown again, from now."""
        if self._witnessed and self.witness is not None and self.witness.has_acted():
            self._end_now()
            return
        running = self._running() if self._witnessed else None
        with self._lock:
            if self._stop.is_set():
                return
            now = time.monotonic()
            self._arm_locked(
                now, limit_at(now, self._earliest_deadline(), self.limit_seconds), running
            )

    def attempt_began(self, deadline: float) -> None:
        """Called by the slot thread before the handler runs (its deadline is set)."""
        fires_at = deadline + GRACE_SECONDS
        if fires_at >= self._fires_at:  # the common case: already armed for sooner
            return
        running = self._running() if self._witnessed else None
        with self._lock:
            if fires_at < self._fires_at and not self._stop.is_set():
                now = time.monotonic()
                self._arm_locked(now, max(MIN_LIMIT_SECONDS, fires_at - now), running)

    def _arm_locked(
        self, now: float, seconds: float, running: tuple[str, list[RunningAttempt]] | None
    ) -> None:
        """Give up `seconds` from now; with a witness, the process ends `WITNESS_SECONDS`
        later, once the witness has recorded what was running."""
        gives_up, ends_in = now + seconds, seconds
        if running is not None and self.witness is not None:
            self.witness.tell(gives_up, *running)
            ends_in += WITNESS_SECONDS
        # Each call replaces the pending timer.
        faulthandler.dump_traceback_later(ends_in, exit=True, file=self._stream)
        self._fires_at = gives_up

    def _end_now(self) -> None:
        """The witness recorded this process's attempts as ended by the watchdog (the
        process ran no Python for the limit, then came back): end it as promised."""
        log.error(
            "the watchdog gave up on this process (it ran no Python code for too long) and "
            "its running attempts were recorded as lost: exiting %d",
            FROZEN_EXIT_STATUS,
            extra={"action": "watchdog_exit"},
        )
        with self._lock:
            # From Python, holding the GIL: the other threads cannot move their frames while
            # they are printed. (A 1 ms faulthandler timer would print them from its own C
            # thread while they run — the heartbeat of a resumed process is busy — and
            # could crash the process instead of ending it with this status.)
            faulthandler.cancel_dump_traceback_later()
            # The header faulthandler's timer prints, with the limit that ran out.
            self._stream.write(f"Timeout ({timedelta(seconds=round(self.limit_seconds))})!\n")
            self._stream.flush()
            faulthandler.dump_traceback(file=self._stream, all_threads=True)
            self._stream.flush()
            os._exit(FROZEN_EXIT_STATUS)

    def _loop(self) -> None:
        while not self._stop.wait(REARM_SECONDS):
            self.rearm()


def _has_fileno(stream: TextIO) -> bool:
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    return True
