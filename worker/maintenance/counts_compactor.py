"""Folds the job-count deltas PostgreSQL appends on every change of `jobdesk_jobs`
(`jobdesk.shared.core.job_counts`) into one row per group, so a reader sums a few
hundred rows rather than every claim and completion since the last pass."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from jobdesk.shared.core.job_counts import COMPACT_INTERVAL_SECONDS, compact, maintained
from jobdesk.shared.settings import Settings


def interval_seconds(settings: Settings) -> float:
    del settings  # fixed for now (a setting can come with the settings rewrite)
    return COMPACT_INTERVAL_SECONDS


def run_once(engine: sa.Engine, now: datetime, settings: Settings) -> int:
    del now, settings
    if not maintained(engine):
        return 0
    with engine.begin() as conn:
        return compact(conn)
