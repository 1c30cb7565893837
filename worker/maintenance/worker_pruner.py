"""Removes `workers` rows whose heartbeat stopped long ago (SIGKILLed processes never
deregister). Silent workers stay visible on the dashboard, flagged, until then."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import sqlalchemy as sa

from jobdesk.shared.core.worker_registry import prune_stale_workers
from jobdesk.shared.settings import Settings, parse_seconds

log = logging.getLogger("jobdesk.maintenance.worker_pruner")

DEFAULT_PRUNE_AFTER_SECONDS = 3600.0
INTERVAL_SECONDS = 60.0


def prune_after(settings: Settings) -> timedelta:
    raw = settings.extra.get("worker_prune_after_seconds")
    seconds = (
        DEFAULT_PRUNE_AFTER_SECONDS
        if raw is None
        else parse_seconds("JOBDESK_WORKER_PRUNE_AFTER_SECONDS", raw)
    )
    return timedelta(seconds=seconds)


def interval_seconds(settings: Settings) -> float:
    return min(INTERVAL_SECONDS, max(1.0, prune_after(settings).total_seconds() / 2))


def run_once(engine: sa.Engine, now: datetime, settings: Settings) -> int:
    with engine.begin() as conn:
        pruned = prune_stale_workers(conn, now=now, older_than=prune_after(settings))
    if pruned:
        log.info("pruned %d silent worker rows", pruned, extra={"action": "workers_pruned"})
    return pruned
