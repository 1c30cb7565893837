"""The trace contexts of jobs in the database: kept at enqueue, read per attempt, and the
trace id a page links to."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

import sqlalchemy as sa

from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.driver.base import Driver
from jobdesk.shared.tracing.models import job_traces

_t = job_traces.c


class StoredTrace(NamedTuple):
    traceparent: str
    tracestate: str | None
    created_at: datetime

    @property
    def trace_id(self) -> str | None:
        """The 32 hex digits of the trace id, or None for a malformed value."""
        parts = self.traceparent.split("-")
        return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None


def keep_traces(conn: sa.Connection, rows: Sequence[tuple[int, str, str | None]]) -> None:
    """Store (job id, traceparent, tracestate) for new jobs, in the enqueue's transaction."""
    if rows:
        conn.execute(
            sa.insert(job_traces),
            [{"job_id": j, "traceparent": p, "tracestate": s} for j, p, s in rows],
        )


def trace_of(conn: sa.Connection, job_id: int) -> StoredTrace | None:
    row = conn.execute(
        sa.select(_t.traceparent, _t.tracestate, _t.created_at).where(_t.job_id == job_id)
    ).first()
    return None if row is None else StoredTrace(row.traceparent, row.tracestate, row.created_at)


#: The kept contexts of a list of jobs (bound as `ids`), per driver: compiled once.
_BY_IDS: dict[type[Driver], sa.Select[tuple[int, str, str | None, datetime]]] = {}


def traces_of(conn: sa.Connection, job_ids: Sequence[int]) -> dict[int, StoredTrace]:
    """The kept contexts of many jobs in one query (a worker's claimed batch)."""
    if not job_ids:
        return {}
    found = driver(conn)
    query = _BY_IDS.get(type(found))
    if query is None:
        query = _BY_IDS[type(found)] = sa.select(
            _t.job_id, _t.traceparent, _t.tracestate, _t.created_at
        ).where(found.equals_any(_t.job_id, "ids"))
    rows = conn.execute(query, {"ids": list(job_ids)})
    return {
        row.job_id: StoredTrace(row.traceparent, row.tracestate, row.created_at) for row in rows
    }
