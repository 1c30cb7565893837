"""The one shape of the worker's background threads that talk to the database: a daemon
thread that runs `step()` again and again until `stop()`, waiting `interval` seconds
between steps. A database error (`DB_ERRORS`, or the loop's own `outage_errors`) backs
off with jitter and is logged once when the outage starts and once when it ends; any
other error is logged with its stack and backed off the same way, so no loop ever dies
of one bad step.

A step may block for as long as it likes (the listener's waits for notifications); it
should look at `stopping` when it does, and call `healthy()` once its connection works
(a step that returns does so implicitly). `failures` says how many steps in a row
failed, so a step can tell a first start from a reconnection.
"""

from __future__ import annotations

import logging
import threading

from jobdesk.worker.resilience import DB_ERRORS, Backoff, OutageLog


class ServiceLoop(threading.Thread):
    #: Errors that mean "the database is away", beyond `DB_ERRORS`.
    outage_errors: tuple[type[BaseException], ...] = ()

    def __init__(
        self,
        name: str,
        *,
        log: logging.Logger,
        interval: float,
        backoff: Backoff | None = None,
        first_wait: float | None = None,
    ) -> None:
        super().__init__(name=f"jobdesk-{name}", daemon=True)
        self.interval = interval
        self._log = log
        self._what = name
        self._backoff = backoff or Backoff()
        self._first_wait = interval if first_wait is None else first_wait
        self._stop_event = threading.Event()
        self._outage = OutageLog(log, name)

    def step(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self._stop_event.set()

    @property
    def stopping(self) -> threading.Event:
        return self._stop_event

    @property
    def failures(self) -> int:
        return self._backoff.failures

    def run(self) -> None:
        wait = self._first_wait
        while not self._stop_event.wait(wait):
            try:
                self.step()
            except (*DB_ERRORS, *self.outage_errors) as exc:
                wait = self._backoff.next()
                self._outage.failed(exc, wait)
                continue
            except Exception:
                wait = self._backoff.next()
                self._log.exception(
                    "%s failed", self._what, extra={"action": f"{self._what}_error"}
                )
                continue
            self.healthy()
            wait = self.interval

    def healthy(self) -> None:
        """The database answers again: the next failure starts a new outage."""
        self._backoff.reset()
        self._outage.recovered()
