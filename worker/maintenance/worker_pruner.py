"""Removes `workers` rows whose heartbeat stopped long ago (SIGKILLed processes never
deregister). Silent workers stay visible on the dashboard, flagged, until then."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import sqlalchemy as sa

from jobdesk.shared.core.worker_registry import prune_stale_workers
from jobdesk.shared.settings import Settings

log = logging.getLogger("jobdesk.maintenance.worker_pruner")

INTERVAL_SECONDS = 60.0


def prune_after(settings: Settings) -> timedelta:
    return timedelta(seconds=settings.worker_prune_after_seconds)


def interval_seconds(settings: Settings) -> float:
    return min(INTERVAL_SECONDS, max(1.0, prune_after(settings).total_seconds() / 2))


def run_once(engine: sa.Engine, now: datetime, settings: Settings) -> int:
    with engine.begin() as conn:
        pruned = prune_stale_workers(conn, now=now, older_than=prune_after(settings))
    if pruned:
        log.info("pruned %d silent worker rows", pruned, extra={"action": "workers_pruned"})
    return pruned
