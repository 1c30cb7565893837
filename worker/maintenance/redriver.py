"""Runs the paced redrives (`jobdesk.shared.redrives`): every second, one step of each
running or paused redrive — judge its new jobs, apply its stop rule, requeue what its
pace allows — each in its own transaction. Each step locks its redrive's row, so a
second leader during a hand-over finds nothing due that the first one took."""

from __future__ import annotations

import logging
from datetime import datetime

import sqlalchemy as sa

from jobdesk.shared.redrives.stepper import active_redrive_ids, redrive_step
from jobdesk.shared.settings import Settings
from jobdesk.worker.resilience import DB_ERRORS

log = logging.getLogger("jobdesk.maintenance.redriver")

#: One step a second: a pace of one job per second needs no faster tick, and faster
#: paces requeue several per step.
INTERVAL_SECONDS = 1.0


def interval_seconds(settings: Settings) -> float:
    del settings  # fixed: the pace is each redrive's own
    return INTERVAL_SECONDS


def run_once(engine: sa.Engine, now: datetime) -> int:
    """One step of every redrive at work; returns how many jobs were requeued. A redrive
    whose step fails is logged and tried again next tick, the others go on; a database
    that is away ends the pass (the scheduler logs it and comes back)."""
    with engine.connect() as conn:
        ids = active_redrive_ids(conn)
        conn.rollback()
    requeued = 0
    for redrive_id in ids:
        try:
            with engine.begin() as conn:
                result = redrive_step(conn, redrive_id, now=now)
        except DB_ERRORS:
            raise
        except Exception:
            log.exception(
                "redrive #%s: its step failed; trying again next tick",
                redrive_id,
                extra={"action": "redrive_step_error", "redrive_id": redrive_id},
            )
            continue
        if result is not None:
            requeued += result.requeued
    return requeued
