"""The reaper: jobs whose lease ran out (their worker died, hung or lost the database)
go back to `failed` with backoff, or to `dead` when their attempts are spent; the
attempt is recorded as `lost` with the error "worker lost" (F1, G4).

A live worker keeps extending its jobs' leases, so only abandoned jobs are touched.
Retry policies come from the job types this process registered; a type it does not
know retries with the default backoff.
"""

from __future__ import annotations

import logging
from datetime import datetime

import sqlalchemy as sa

from shared.settings import Settings
from shared.transitions import rescue_expired
from worker.registry import registry

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
