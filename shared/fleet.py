"""Read side of the running system for operators: workers and their heartbeats, the
job types they run, and recent webhook delivery health per endpoint.

The worker writes these tables (`shared.worker_registry`, `shared.deliveries`); this
module only reads them. The leader lease is read with `shared.leader.current_lease`,
alerts with `shared.alerts.list_alerts`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from shared.models import webhook_deliveries, workers


def _names(value: Any) -> list[str]:
    """`workers.queues` / `job_types` hold a JSON list (or an object keyed by name)."""
    if isinstance(value, dict):
        return sorted(str(key) for key in value)
    if isinstance(value, list | tuple):
        return sorted(str(item) for item in value)
    return []


@dataclass(frozen=True, slots=True)
class WorkerRow:
    id: str
    host: str
    pid: int
    queues: list[str]
    job_types: list[str]
    concurrency: int
    version: str
    started_at: datetime
    last_seen_at: datetime
    stopping: bool
    alive: bool
    seconds_since_seen: float
    clock_skew_seconds: float | None


def list_workers(
    conn: sa.Connection, *, now: datetime, stale_after: timedelta, limit: int = 500
) -> list[WorkerRow]:
    """Known workers, live ones first; `alive` = heartbeat within `stale_after`."""
    rows = conn.execute(
        sa.select(workers).order_by(workers.c.last_seen_at.desc(), workers.c.id).limit(limit)
    )
    found = []
    for row in rows:
        mapping = row._mapping
        seen = max(0.0, (now - row.last_seen_at).total_seconds())
        skew = mapping.get("clock_skew_seconds")
        found.append(
            WorkerRow(
                id=row.id,
                host=row.host,
                pid=row.pid,
                queues=_names(row.queues),
                job_types=_names(row.job_types),
                concurrency=row.concurrency,
                version=row.version,
                started_at=row.started_at,
                last_seen_at=row.last_seen_at,
                stopping=bool(row.stopping),
                alive=seen <= stale_after.total_seconds(),
                seconds_since_seen=seen,
                clock_skew_seconds=float(skew) if skew is not None else None,
            )
        )
    found.sort(key=lambda w: (not w.alive, w.id))
    return found


def worker_job_types(conn: sa.Connection) -> frozenset[str]:
    """Every job type some registered worker has declared it can run."""
    found: set[str] = set()
    for (value,) in conn.execute(sa.select(workers.c.job_types)):
        found.update(_names(value))
    return frozenset(found)


@dataclass(frozen=True, slots=True)
class DeliveryHealth:
    endpoint: str
    attempts: int
    failures: int
    last_at: datetime | None
    last_status_code: int | None

    @property
    def failure_rate(self) -> float:
        return self.failures / self.attempts if self.attempts else 0.0


def delivery_health(
    conn: sa.Connection, endpoints: Iterable[str], *, since: datetime
) -> dict[str, DeliveryHealth]:
    """Delivery attempts and failures (anything but a 2xx answer) per endpoint since `since`."""
    names = list(endpoints)
    if not names:
        return {}
    ok = webhook_deliveries.c.status_code.between(200, 299)
    query = (
        sa.select(
            webhook_deliveries.c.endpoint,
            sa.func.count().label("n"),
            sa.func.sum(sa.case((ok, 0), else_=1)).label("failed"),
            sa.func.max(webhook_deliveries.c.at).label("last_at"),
        )
        .where(webhook_deliveries.c.endpoint.in_(names), webhook_deliveries.c.at >= since)
        .group_by(webhook_deliveries.c.endpoint)
    )
    return {
        row.endpoint: DeliveryHealth(row.endpoint, row.n, int(row.failed or 0), row.last_at, None)
        for row in conn.execute(query)
    }
