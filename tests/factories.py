"""Test factories: rows in a chosen state without going through a worker."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.models import jobs
from jobdesk.shared.settings import Settings


def make_job(conn: sa.Connection, **fields: Any) -> int:
    """Insert a job row directly (any status); returns its id. Caller commits."""
    values: dict[str, Any] = {"job_type": "test.noop", "payload": {}}
    values.update(fields)
    return int(conn.execute(sa.insert(jobs).values(**values).returning(jobs.c.id)).scalar_one())


def job_row(conn: sa.Connection, job_id: int) -> sa.Row[Any]:
    return conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).one()


def env_settings(values: Mapping[str, str] | None = None, /, **more: str) -> Settings:
    """Settings as the environment would give them: `alert_email="x"` stands for
    `JOBDESK_ALERT_EMAIL=x` (parsed and checked like the real thing)."""
    merged = {**(values or {}), **more}
    return Settings.from_env({f"JOBDESK_{name.upper()}": raw for name, raw in merged.items()})
