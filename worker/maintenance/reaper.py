"""The reaper: jobs whose lease ran out (their worker died, hung or lost the database)
go back to `failed` with backoff, or to `dead` when their attempts are spent; the
attempt is recorded as `lost` with the error "worker lost" (F1, G4). A `running` row
with no lease at all (written by hand) is rescued the same way at once. A job an
operator asked to cancel is not retried: it ends `cancelled`, its attempt recorded
`cancelled` (a cancel that found the job's row locked — its worker frozen
mid-transaction — is moved onto the job first, `decisions.apply_cancel_requests`).

A live worker keeps extending its jobs' leases, so only abandoned jobs are touched.
Retry policies come from the job types the running worker registered (its
`MaintenanceContext`); a type it does not know retries with the default backoff.

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
from typing import TYPE_CHECKING

import sqlalchemy as sa

from jobdesk.shared.core.decisions import apply_cancel_requests
from jobdesk.shared.core.retry import RetryPolicy
from jobdesk.shared.core.transitions import rescue_expired
from jobdesk.shared.settings import Settings

if TYPE_CHECKING:
    from jobdesk.worker.maintenance.tasks import MaintenanceContext

log = logging.getLogger("jobdesk.maintenance.reaper")

#: Jobs rescued per transaction; a bigger backlog is worked through batch by batch.
BATCH = 500
#: Batches per run, so one run cannot hold the scheduler thread for long.
MAX_BATCHES = 20


def run_once(engine: sa.Engine, now: datetime, *, policy_for: Callable[[str], RetryPolicy]) -> int:
    """Rescue every job whose lease expired before `now`; returns how many. Cancel
    requests that found their job's row locked are moved onto their jobs first, so a
    job whose worker froze ends `cancelled`, as asked, rather than retried."""
    with engine.begin() as conn:
        apply_cancel_requests(conn, now=now)
    total = 0
    for _ in range(MAX_BATCHES):
        with engine.begin() as conn:
            rescued = rescue_expired(conn, now=now, policy_for=policy_for, limit=BATCH)
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

    def __init__(
        self,
        reaper_interval_seconds: float,
        heartbeat_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._gap_limit = max(3 * reaper_interval_seconds, heartbeat_seconds)
        self._hold = 1.5 * heartbeat_seconds
        self._clock = clock
        self._last_ok: float | None = None
        self._contact_since: float | None = None

    def holding(self) -> bool:
        now = self._clock()
        if self._last_ok is not None and now - self._last_ok <= self._gap_limit:
            return False
        if self._contact_since is None:
            return True
        return now - self._contact_since < self._hold

    def contact(self) -> None:
        """The database answered; the hold-back period starts at the first answer."""
        if self._contact_since is None:
            self._contact_since = self._clock()

    def succeeded(self) -> None:
        self._last_ok = self._clock()
        self._contact_since = None

    def failed(self) -> None:
        self._contact_since = None


class Reaper:
    """The reaper task of one scheduler, with its own contact guard."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._guard: ContactGuard | None = None

    @staticmethod
    def interval_seconds(settings: Settings) -> float:
        return settings.reaper_interval_seconds

    def scheduled_run(self, ctx: MaintenanceContext, now: datetime) -> int:
        """`run_once` as the leader's scheduler runs it: held back after lost contact,
        for 1.5 of this worker's effective heartbeats (a 4 s lease heartbeats every
        1.33 s, not every `JOBDESK_HEARTBEAT_SECONDS`)."""
        if self._guard is None:
            self._guard = ContactGuard(
                ctx.settings.reaper_interval_seconds, ctx.heartbeat_seconds, self._clock
            )
        guard = self._guard
        try:
            if guard.holding():
                with ctx.engine.connect() as conn:
                    conn.execute(sa.text("SELECT 1"))  # raises while the database is away
                guard.contact()
                if guard.holding():
                    return 0
            rescued = run_once(ctx.engine, now, policy_for=ctx.policy_for)
        except Exception:
            guard.failed()
            raise
        guard.succeeded()
        return rescued
