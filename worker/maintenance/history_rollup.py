"""Keeps the History page's per-minute buckets: folds newly finished attempts in and
drops the buckets no chart range reaches (`jobdesk.shared.history.rollup`).

Run by the maintenance leader, never on a worker's completion path: completions only
write their attempt row, and this task reads those rows afterwards, in chunks."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from jobdesk.shared.history.rollup import prune, roll_up
from jobdesk.shared.settings import Settings

#: Buckets lag at least `rollup.SETTLE` behind; twice a minute keeps the lag near it.
INTERVAL_SECONDS = 30.0


def interval_seconds(settings: Settings) -> float:
    del settings  # fixed: the charts' resolution is a minute
    return INTERVAL_SECONDS


def run_once(engine: sa.Engine, now: datetime) -> int:
    """One pass: roll up what settled, prune what expired; returns attempts counted."""
    counted = roll_up(engine, now).attempts
    with engine.begin() as conn:
        prune(conn, now)
    return counted
