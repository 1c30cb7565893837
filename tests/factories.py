"""Test factories: rows in a chosen state without going through a worker."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.models import jobs


def make_job(conn: sa.Connection, **fields: Any) -> int:
    """Insert a job row directly (any status); returns its id. Caller commits."""
    values: dict[str, Any] = {"job_type": "test.noop", "payload": {}}
    values.update(fields)
    return int(conn.execute(sa.insert(jobs).values(**values).returning(jobs.c.id)).scalar_one())


def job_row(conn: sa.Connection, job_id: int) -> sa.Row[Any]:
    return conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).one()
