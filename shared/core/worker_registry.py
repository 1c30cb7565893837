"""The `workers` table: which worker processes exist and when each last checked in.

Each `jobdesk worker` process registers at start with an id unique per process (host,
pid and a random suffix, so two containers that both run as pid 1 on hosts with the
same name never share one — F7), heartbeats while it runs, marks itself `stopping` on
SIGTERM and deregisters on a clean exit. The leader prunes rows whose heartbeat is long
gone (a SIGKILLed worker never deregisters). The dashboard reads it with
`list_workers`.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.job_types import known_types
from jobdesk.shared.core.models import NAME_LENGTH, workers

_wc = workers.c


def new_worker_id(host: str | None = None, pid: int | None = None) -> str:
    """`host:pid:suffix`, bounded to the column's length (the suffix always survives)."""
    host = (host or socket.gethostname() or "host").replace(":", "_")
    suffix = secrets.token_hex(4)
    tail = f":{pid if pid is not None else os.getpid()}:{suffix}"
    return host[: NAME_LENGTH - len(tail)] + tail


def register_worker(
    conn: sa.Connection,
    *,
    worker_id: str,
    host: str,
    pid: int,
    queues: Sequence[str],
    job_types: Sequence[str],
    concurrency: int,
    version: str,
    now: datetime,
    clock_skew_seconds: float | None = None,
) -> None:
    """Insert this process's row (or refresh it after it was pruned during an outage)."""
    values: dict[str, Any] = {
        "host": host[:255],
        "pid": pid,
        "queues": list(queues),
        "job_types": list(job_types),
        "concurrency": concurrency,
        "version": version[:50],
        "last_seen_at": now,
        "stopping": False,
        "clock_skew_seconds": clock_skew_seconds,
    }
    updated = conn.execute(sa.update(workers).where(_wc.id == worker_id).values(**values))
    if not updated.rowcount:
        conn.execute(sa.insert(workers).values(id=worker_id, started_at=now, **values))


def heartbeat_worker(
    conn: sa.Connection, worker_id: str, *, now: datetime, clock_skew_seconds: float | None = None
) -> bool:
    """Record that the worker is alive; False when its row is gone (re-register then)."""
    result = conn.execute(
        sa.update(workers)
        .where(_wc.id == worker_id)
        .values(last_seen_at=now, clock_skew_seconds=clock_skew_seconds)
    )
    return bool(result.rowcount)


def mark_stopping(conn: sa.Connection, worker_id: str, *, now: datetime) -> None:
    conn.execute(
        sa.update(workers).where(_wc.id == worker_id).values(stopping=True, last_seen_at=now)
    )


def deregister_worker(conn: sa.Connection, worker_id: str) -> None:
    conn.execute(sa.delete(workers).where(_wc.id == worker_id))


def job_type_names(value: Any) -> list[str]:
    """`workers.queues` / `job_types` hold a JSON list (or an object keyed by name)."""
    if isinstance(value, dict):
        return sorted(str(key) for key in value)
    if isinstance(value, list | tuple):
        return sorted(str(item) for item in value)
    return []


def worker_job_types(conn: sa.Connection) -> frozenset[str]:
    """Every job type some registered worker has declared it can run."""
    found: set[str] = set()
    for (value,) in conn.execute(sa.select(workers.c.job_types)):
        found.update(job_type_names(value))
    return frozenset(found)


def runnable_types(conn: sa.Connection) -> frozenset[str]:
    """Types this installation can run: declared defaults plus what workers registered.
    A job of any other type would wait forever, so operators may not requeue it."""
    return known_types() | worker_job_types(conn)


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
                queues=job_type_names(row.queues),
                job_types=job_type_names(row.job_types),
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


def list_live_workers(
    conn: sa.Connection, *, now: datetime, stale_after: timedelta
) -> list[WorkerRow]:
    """Workers whose last heartbeat is newer than `stale_after`, by id."""
    live = [w for w in list_workers(conn, now=now, stale_after=stale_after) if w.alive]
    return sorted(live, key=lambda w: w.id)


def prune_stale_workers(conn: sa.Connection, *, now: datetime, older_than: timedelta) -> int:
    """Delete rows of workers silent for longer than `older_than`; returns how many."""
    result = conn.execute(sa.delete(workers).where(_wc.last_seen_at < now - older_than))
    return int(result.rowcount or 0)
