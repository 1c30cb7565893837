"""APScheduler 3.x as a clock for maintenance; the database decides who acts.

Every worker process runs this scheduler (never the dashboard). One job renews — or
tries to take — the `leader` lease every third of its TTL; each maintenance task runs on
its own interval but does nothing unless this process holds the lease, acting for the
`MaintenanceContext` it was given (this worker's engine, settings and job types). Tasks are
idempotent, so the short overlap when leadership changes hands is harmless. Any error
is logged and the task simply runs again next tick: a database outage never stops the
scheduler or crash-loops the worker.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

from jobdesk.shared.core.leader import LEADER, acquire_lease, release_lease
from jobdesk.worker.maintenance.periodic import declare_schedules
from jobdesk.worker.maintenance.tasks import MaintenanceContext, MaintenanceTask, default_tasks
from jobdesk.worker.resilience import DB_ERRORS

log = logging.getLogger("jobdesk.maintenance")


class Maintenance:
    """Leader election plus the task schedule, for one worker process."""

    def __init__(
        self,
        context: MaintenanceContext,
        *,
        holder: str,
        leader_ttl: float,
        clock: Callable[[], datetime],
        tasks: list[MaintenanceTask] | None = None,
    ) -> None:
        self._context = context
        self._engine = context.engine
        self._settings = context.settings
        self._holder = holder
        self._ttl = timedelta(seconds=leader_ttl)
        self._clock = clock
        self._tasks = default_tasks() if tasks is None else tasks
        self._lock = threading.Lock()
        self._leader_until = 0.0  # monotonic time our lease is known good until
        self.runs: dict[str, int] = {}
        self._scheduler = BackgroundScheduler(
            executors={"default": ThreadPoolExecutor(max_workers=2)},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
            timezone="UTC",
        )

    @property
    def is_leader(self) -> bool:
        with self._lock:
            return time.monotonic() < self._leader_until

    def start(self) -> None:
        renew_every = max(0.1, self._ttl.total_seconds() / 3)
        self._scheduler.add_job(
            self.elect, "interval", seconds=renew_every, id="leader", next_run_time=_now_local()
        )
        if self._context.schedules:
            # Every worker (not only the leader) stores what its code declares; retried
            # each second until the database takes it.
            self._scheduler.add_job(
                self.declare, "interval", seconds=1.0, id="declare", next_run_time=_now_local()
            )
        for task in self._tasks:
            interval = max(0.05, float(task.interval_seconds(self._settings)))
            self._scheduler.add_job(
                self.run_task, "interval", seconds=interval, args=[task], id=f"task:{task.name}"
            )
        self._scheduler.start()

    def elect(self) -> bool:
        """Take or renew the leader lease; returns whether this process leads."""
        started = time.monotonic()
        try:
            now = self._clock()
            with self._engine.begin() as conn:
                held = acquire_lease(conn, LEADER, self._holder, ttl=self._ttl, now=now)
        except Exception as exc:
            # Unknown whether the lease is still ours: act as a follower until we know.
            self._set_leader(False, 0.0)
            log.warning(
                "leader election failed: %s",
                str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                extra={"action": "leader_error"},
            )
            return False
        # Leadership counts from before the round trip and stops a safety margin early;
        # an answer that took longer than that (a stalled process) grants nothing.
        until = started + self._ttl.total_seconds() * 0.8
        held = held and time.monotonic() < until
        self._set_leader(held, until)
        return held

    def _set_leader(self, held: bool, until: float) -> None:
        with self._lock:
            was = time.monotonic() < self._leader_until
            self._leader_until = until if held else 0.0
        if held and not was:
            log.info(
                "this worker is now the maintenance leader", extra={"action": "leader_elected"}
            )
        elif was and not held:
            log.info("this worker is no longer the leader", extra={"action": "leader_lost"})

    def declare(self) -> None:
        try:
            declare_schedules(self._engine, self._context.schedules, self._clock())
        except Exception as exc:
            log.warning(
                "could not store this worker's schedules (%s); retrying",
                str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                extra={"action": "schedules_declare_failed"},
            )
            return
        with contextlib.suppress(Exception):
            self._scheduler.remove_job("declare")

    def run_task(self, task: MaintenanceTask) -> None:
        if not self.is_leader:
            return
        try:
            task.run(self._context, self._clock())
        except DB_ERRORS as exc:
            log.warning(
                "maintenance task %s: database unavailable (%s); retrying next tick",
                task.name,
                str(getattr(exc, "orig", None) or exc).splitlines()[0],
                extra={"action": "maintenance_error", "task": task.name},
            )
            return
        except Exception:
            log.exception(
                "maintenance task %s failed; retrying next tick",
                task.name,
                extra={"action": "maintenance_error", "task": task.name},
            )
            return
        self.runs[task.name] = self.runs.get(task.name, 0) + 1

    def stop(self) -> None:
        """Stop the clock and hand leadership over at once (no waiting for expiry)."""
        with contextlib.suppress(Exception):  # already stopped
            self._scheduler.shutdown(wait=False)
        if not self.is_leader:
            return
        self._set_leader(False, 0.0)
        try:
            with self._engine.begin() as conn:
                release_lease(conn, LEADER, self._holder)
        except DB_ERRORS:
            log.warning(
                "could not release the leader lease; it will expire",
                extra={"action": "leader_release_failed"},
            )


def _now_local() -> datetime:
    return datetime.now(UTC)
