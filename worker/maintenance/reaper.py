"""The reaper: jobs whose lease ran out (their worker died, hung or lost the database)
go back to `failed` with backoff, or to `dead` when their attempts are spent; the
attempt is recorded as `lost` with the error "worker lost" (F1, G4).

A live worker keeps extending its jobs' leases, so only abandoned jobs are touched.
Retry policies come from the job types this process registered; a type it does not
know retries with the default backoff.

After the reaper itself lost contact with the database (an outage, a pause, a new
leader), every lease looks expired the moment contact returns — including those of
live workers whose heartbeats could not get through either. `ContactGuard` holds the
first pass back for one and a half heartbeat intervals so they can renew first; the
work would be redone otherwise (still correct, thanks to fencing and the effects
ledger, but wasteful).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime

import sqlalchemy as sa

from jobdesk.shared.core.transitions import rescue_expired
from jobdesk.shared.settings import Settings
from jobdesk.worker.registry import registry

log = logging.getLogger("jobdesk.maintenance.reaper")

#: Jobs rescued per transaction; a bigger backlog is worked through batch by batch.
BATCH = 500
#: Batches per run, so one run cannot hold the scheduler thread for long.
MAX_BATCHES = 20


def interval_seconds(settings: Settings) -> float:
    return settings.reaper_interval_seconds


def run_once(engine: sa.Engine, now: datetime, settings: Settings) -> int:
    """Rescue every job whose lease expired before `now`; returns how many."""
    total = 0
    for _ in range(MAX_BATCHES):
        with engine.begin() as conn:
            rescued = rescue_expired(conn, now=now, policy_for=registry.policy_for, limit=BATCH)
        total += len(rescued)
        for job_id, status in rescued:
            log.warning(
                "job %s: worker lost; now %s",
                job_id,
                status.value,
                extra={"action": "job_rescued", "job_id": job_id, "status": status.value},
            )
        if len(rescued) < BATCH:
            break
    return total


class ContactGuard:
    """Holds reaper passes back until contact with the database has lasted a while."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last_ok: float | None = None
        self._contact_since: float | None = None

    def holding(self, settings: Settings) -> bool:
        now = self._clock()
        gap_limit = max(3 * settings.reaper_interval_seconds, settings.heartbeat_seconds)
        if self._last_ok is not None and now - self._last_ok <= gap_limit:
            return False
        if self._contact_since is None:
            return True
        return now - self._contact_since < 1.5 * settings.heartbeat_seconds

    def contact(self) -> None:
        """The database answered; the hold-back period starts at the first answer."""
        if self._contact_since is None:
            self._contact_since = self._clock()

    def succeeded(self) -> None:
        self._last_ok = self._clock()
        self._contact_since = None

    def failed(self) -> None:
        self._contact_since = None


_guard = ContactGuard()


def scheduled_run(engine: sa.Engine, now: datetime, settings: Settings) -> int:
    """`run_once` as the leader's scheduler runs it: held back after lost contact."""
    try:
        if _guard.holding(settings):
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))  # raises while the database is away
            _guard.contact()
            if _guard.holding(settings):
                return 0
        rescued = run_once(engine, now, settings)
    except Exception:
        _guard.failed()
        raise
    _guard.succeeded()
    return rescued
