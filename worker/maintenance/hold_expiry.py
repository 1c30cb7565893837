"""Releases the quarantine holds whose end time passed (`jobdesk.shared.flow.holds`):
their jobs go back in line, and the release is audited as the end time's doing."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from jobdesk.shared.core.clock import db_now
from jobdesk.shared.flow.holds import release_expired
from jobdesk.shared.settings import Settings

#: How often the leader looks; a hold ends at most this late.
INTERVAL_SECONDS = 5.0


def interval_seconds(settings: Settings) -> float:
    del settings  # fixed: an end time is kept to within a few seconds
    return INTERVAL_SECONDS


def run_once(engine: sa.Engine, now: datetime) -> int:
    del now  # the database's clock decides, as it did when the hold was placed
    with engine.begin() as conn:
        return release_expired(conn, db_now(conn))
