"""Taking jobs out: `claim` hands a worker due jobs under a lease with a fencing token.

`ClaimedJob` is what a worker holds while it runs a job; `JobRef` is the part every
later write of that attempt needs (the compare-and-set key of `transitions`).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import sqlalchemy as sa

from jobdesk.shared.core.documents import decode_document, not_an_object
from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.driver.base import ClaimFilter

__all__ = ["ClaimedJob", "JobRef", "claim"]


class ClaimedJob(NamedTuple):
    """A job a worker now holds under a lease; `lease_token` fences every later write.

    An immutable record (a NamedTuple: a claim builds hundreds per statement, and a
    frozen dataclass's `__init__` cost 2.2 µs each against 0.3).
    """

    id: int
    job_type: str
    queue: str
    payload: dict[str, Any]
    attempt: int
    max_attempts: int
    priority: int
    idempotency_key: str | None
    group_key: str | None
    timeout_seconds: float | None
    lease_token: int
    lease_expires_at: datetime
    started_at: datetime
    worker_id: str

    @property
    def ref(self) -> JobRef:
        return JobRef(self.id, self.lease_token, self.attempt, self.worker_id, self.started_at)


@dataclass(frozen=True, slots=True)
class JobRef:
    """What a worker needs to write the outcome of one attempt (compare-and-set key)."""

    id: int
    lease_token: int
    attempt: int
    worker_id: str
    started_at: datetime | None = None


def claim(
    conn: sa.Connection,
    *,
    worker_id: str,
    limit: int,
    queues: Sequence[str] | None = None,
    job_types: Sequence[str] | None = None,
    lease_seconds: float = 30.0,
    now: datetime | None = None,
) -> list[ClaimedJob]:
    """Atomically take up to `limit` due jobs, oldest first by (priority, next_run_at, id).

    One statement (the driver's `claim_jobs`): the candidates are picked with `FOR UPDATE
    SKIP LOCKED` on PostgreSQL, under the transaction's write lock on SQLite. The jobs
    come back in that order. Without `now` the database clock decides what is due (on
    PostgreSQL read by the claim itself). Each payload must be a JSON object: a row
    holding anything else goes `dead` at once, naming what it holds, and the rest of the
    batch runs.

    `attempts` is incremented here, at claim time, so a job that kills its worker every
    time still runs out of attempts. Only `job_types` this worker knows are taken.

    Give the claim a transaction of its own: on PostgreSQL a claim from every queue
    turns the planner's sorts off until that transaction ends.
    """
    if (
        limit <= 0
        or (queues is not None and not queues)
        or (job_types is not None and not job_types)
    ):
        return []
    token = secrets.randbits(62)
    batch = driver(conn).claim_jobs(
        conn,
        worker_id=worker_id,
        token=token,
        limit=limit,
        which=ClaimFilter(queues, job_types),
        lease_seconds=lease_seconds,
        now=now,
    )
    now = batch.now
    if batch.decoded:
        rows = batch.rows
        # A JSON column takes any JSON value: a plain-SQL row may hold an array, a
        # string or `null` where a handler expects an object.
        if not all(type(row[3]) is dict for row in rows):
            rows = _without_non_objects(conn, rows, worker_id, token, now)
    else:
        rows = _decoded(conn, batch.rows, worker_id, token, now)
    make, lease = ClaimedJob._make, (token, batch.expires, now, worker_id)
    return [make((*row, *lease)) for row in rows]


def _decoded(
    conn: sa.Connection, raw: list[tuple[Any, ...]], worker_id: str, token: int, now: datetime
) -> list[Any]:
    """Rows with their payload (column 3) decoded; a row whose payload cannot be decoded
    goes `dead` at once, naming the problem, and the rest of the batch runs (B11)."""
    from jobdesk.shared.core.transitions import bury_undecodable  # it imports this module

    rows = []
    for row in raw:
        try:
            payload = json.loads(row[3])
        except (RecursionError, ValueError, TypeError):
            # TypeError: SQLite gives a number stored by plain SQL back as a number.
            payload = None
        if isinstance(payload, dict):
            rows.append((*row[:3], payload, *row[4:10]))
            continue
        decoded = decode_document(row[3])
        problem = decoded.problem or not_an_object(decoded.value)
        bury_undecodable(conn, JobRef(row[0], token, row[4], worker_id, now), problem, now=now)
    return rows


def _without_non_objects(
    conn: sa.Connection, rows: list[Any], worker_id: str, token: int, now: datetime
) -> list[Any]:
    """Decoded rows whose payload is a JSON object; each other one goes `dead` at once,
    naming what it holds, and the rest of the batch runs."""
    from jobdesk.shared.core.transitions import bury_undecodable  # it imports this module

    kept = []
    for row in rows:
        if type(row[3]) is dict:
            kept.append(row)
            continue
        ref = JobRef(row[0], token, row[4], worker_id, now)
        bury_undecodable(conn, ref, not_an_object(row[3]), now=now)
    return kept
