"""The periodic enqueuer: fires due schedules, exactly one job per slot.

Run by the maintenance leader every second. For each due schedule it enqueues the
slot's job (idempotency key `schedule:<name>:<slot>`) and moves `next_run_at` on with a
compare-and-set, in one transaction: a leader that lost the race rolls back and the
job it would have added already exists under the same key. A cron schedule in a zone
with daylight saving time gets one job per wall-clock slot for fixed-time expressions
and one per real match for wildcard ones (`worker.cron_clock`). After downtime only the
latest missed slot runs, unless the schedule says `catch_up` (then every missed slot,
up to 100 per pass). The leader fires what the database holds — schedules declared by
any worker, in any version — computing the slots with APScheduler's triggers.

Every worker (leader or not) stores its own declarations at start
(`declare_schedules`), so a schedule exists as soon as a worker that knows it runs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

import sqlalchemy as sa

from jobdesk.shared.schedules.store import (
    ScheduleRow,
    advance,
    due,
    enqueue_slot,
    reschedule,
    sync_declared,
)
from jobdesk.shared.settings import Settings
from jobdesk.worker.schedules import ScheduleSpec

if TYPE_CHECKING:
    from jobdesk.worker.maintenance.tasks import MaintenanceContext

log = logging.getLogger("jobdesk.maintenance.periodic")

INTERVAL_SECONDS = 1.0


def interval_seconds(settings: Settings) -> float:
    return INTERVAL_SECONDS


def declare_schedules(engine: sa.Engine, specs: Sequence[ScheduleSpec], now: datetime) -> int:
    """Store this worker's declared schedules (new or changed ones); returns how many."""
    if not specs:
        return 0
    with engine.begin() as conn:
        changed = sync_declared(conn, [spec.declared(now) for spec in specs], now=now)
    if changed:
        log.info(
            "declared %d schedule(s)", changed, extra={"action": "schedules_declared", "n": changed}
        )
    return changed


def run_once(ctx: MaintenanceContext, now: datetime) -> int:
    """Fire every due schedule; returns how many slots were enqueued."""
    with ctx.engine.connect() as conn:
        rows = due(conn, now)
    return sum(_fire(ctx.engine, row, now) for row in rows)


def _fire(engine: sa.Engine, row: ScheduleRow, now: datetime) -> int:
    spec = ScheduleSpec.from_stored(
        row.name, row.job_type, row.cron, row.every_seconds, row.timezone, row.catch_up
    )
    slots = spec.slots(row.next_run_at, now)
    if not slots:
        # The stored slot repeats a wall-clock time that already ran: move on, no job.
        with engine.begin() as conn:
            reschedule(
                conn,
                row.name,
                expected_next=row.next_run_at,
                next_run_at=spec.next_after(max(now, row.next_run_at)),
                now=now,
            )
        return 0
    with engine.connect() as conn:
        transaction = conn.begin()
        try:
            job_ids = [enqueue_slot(conn, row, slot) for slot in slots]
            moved = advance(
                conn,
                row.name,
                expected_next=row.next_run_at,
                last_slot=slots[-1],
                job_id=job_ids[-1],
                next_run_at=spec.next_after(max(now, slots[-1])),
                now=now,
            )
        except BaseException:
            transaction.rollback()
            raise
        if not moved:  # another leader fired this schedule meanwhile
            transaction.rollback()
            return 0
        transaction.commit()
    skipped = "" if row.catch_up or len(slots) == 1 else " (earlier missed slots skipped)"
    log.info(
        "schedule %s: enqueued job %s for %s%s",
        row.name,
        job_ids[-1],
        slots[-1].isoformat(),
        skipped,
        extra={"action": "schedule_fired", "schedule": row.name, "job_id": job_ids[-1]},
    )
    return len(slots)
