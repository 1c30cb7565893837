"""Report runs: fan-out bookkeeping, exactly-once assembly and operator actions.

A `report.generate` job creates a `report_runs` row and, in the same transaction, a
batch of one `report.chunk` job per slice (idempotency key `report:<run>:chunk:<i>`)
whose `on_success` callback is `report.assemble`. Each chunk stores its result once
(`report_chunk_results` primary key (run_id, chunk_index); a re-run finds it there) and
bumps the run's counters in the same transaction. The batch releases the assembly once,
when every chunk succeeded; it claims the run with a compare-and-set `running →
assembling`, so a re-run of the assembly finishes it rather than starting over.

Progress (`chunks_done/chunks_total`, rows) lives on the run and is mirrored into the
parent job's `progress`. `retry_failed_chunks` and `cancel_remaining` are the
dashboard's operator actions, each audited.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core import audit
from jobdesk.shared.core.audit import AuditAction
from jobdesk.shared.core.decisions import cancel, requeue_dead
from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.errors import ConflictError, NotFoundError
from jobdesk.shared.core.masking import sanitize_error
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.states import CANCELLABLE, JobStatus, sql_values
from jobdesk.shared.reports.models import ReportRunStatus, report_chunk_results, report_runs
from jobdesk.shared.workflows.batches import waiting_success_callbacks

RUNNING, ASSEMBLING = ReportRunStatus.RUNNING, ReportRunStatus.ASSEMBLING
SUCCEEDED, FAILED = ReportRunStatus.SUCCEEDED, ReportRunStatus.FAILED
CANCELLED = ReportRunStatus.CANCELLED
CHUNK_JOB_TYPE = "report.chunk"
RESULT_BATCH = 100

_runs = report_runs.c
_chunks = report_chunk_results.c


def chunk_key(run_id: int, index: int) -> str:
    """Idempotency key of a chunk job: one job per (run, chunk) however often planned."""
    return f"report:{run_id}:chunk:{index}"


@dataclass(frozen=True)
class ChunkProgress:
    recorded: bool
    """False when this chunk's result was already stored (a re-run)."""
    chunks_done: int
    chunks_total: int
    rows: int
    status: str

    @property
    def complete(self) -> bool:
        return self.chunks_total > 0 and self.chunks_done >= self.chunks_total


def create_run(
    conn: sa.Connection,
    *,
    job_id: int | None,
    report: str,
    params: dict[str, Any],
    requested_by: str | None,
    now: datetime,
) -> int:
    return int(
        conn.execute(
            sa.insert(report_runs)
            .values(
                job_id=job_id,
                report=report,
                params=params,
                requested_by=requested_by,
                status=RUNNING,
                created_at=now,
            )
            .returning(_runs.id)
        ).scalar_one()
    )


def find_run_for_job(conn: sa.Connection, job_id: int) -> dict[str, Any] | None:
    row = conn.execute(sa.select(report_runs).where(_runs.job_id == job_id)).first()
    return None if row is None else dict(row._mapping)


def get_run(conn: sa.Connection, run_id: int) -> dict[str, Any] | None:
    row = conn.execute(sa.select(report_runs).where(_runs.id == run_id)).first()
    return None if row is None else dict(row._mapping)


def require_run(conn: sa.Connection, run_id: int) -> dict[str, Any]:
    run = get_run(conn, run_id)
    if run is None:
        raise NotFoundError(f"no report run {run_id}")
    return run


def set_chunks_total(conn: sa.Connection, run_id: int, total: int) -> None:
    conn.execute(sa.update(report_runs).where(_runs.id == run_id).values(chunks_total=total))
    _mirror_progress(conn, run_id)


def _mirror_progress(conn: sa.Connection, run_id: int) -> ChunkProgress | None:
    row = conn.execute(
        sa.select(
            _runs.job_id, _runs.chunks_done, _runs.chunks_total, _runs.rows, _runs.status
        ).where(_runs.id == run_id)
    ).first()
    if row is None:
        return None
    if row.job_id is not None:
        driver(conn).set_progress(
            conn,
            row.job_id,
            {
                "done": row.chunks_done,
                "total": row.chunks_total,
                "rows": row.rows,
                "run_id": run_id,
                "run_status": row.status,
            },
        )
    return ChunkProgress(False, row.chunks_done, row.chunks_total, row.rows, row.status)


def record_chunk_result(
    conn: sa.Connection,
    run_id: int,
    chunk_index: int,
    *,
    rows: int,
    data: dict[str, Any],
    now: datetime,
) -> ChunkProgress:
    """Store one chunk's result exactly once and count it; returns the run's progress."""
    inserted = conn.execute(
        driver(conn)
        .insert(report_chunk_results)
        .values(run_id=run_id, chunk_index=chunk_index, rows=rows, data=data, created_at=now)
        .on_conflict_do_nothing(index_elements=[_chunks.run_id, _chunks.chunk_index])
        .returning(_chunks.chunk_index)
    ).first()
    if inserted is not None:
        conn.execute(
            sa.update(report_runs)
            .where(_runs.id == run_id)
            .values(chunks_done=_runs.chunks_done + 1, rows=_runs.rows + rows)
        )
    progress = _mirror_progress(conn, run_id)
    if progress is None:
        raise NotFoundError(f"no report run {run_id}")
    return ChunkProgress(
        inserted is not None,
        progress.chunks_done,
        progress.chunks_total,
        progress.rows,
        progress.status,
    )


def chunk_recorded(conn: sa.Connection, run_id: int, chunk_index: int) -> bool:
    """Has this chunk's result been stored already (by an earlier run of the job)?"""
    found = conn.execute(
        sa.select(_chunks.chunk_index).where(
            _chunks.run_id == run_id, _chunks.chunk_index == chunk_index
        )
    ).first()
    return found is not None


def claim_assembly(conn: sa.Connection, run_id: int) -> bool:
    """Compare-and-set `running → assembling` once every chunk is counted; True for the
    one caller that must assemble."""
    won = conn.execute(
        sa.update(report_runs)
        .where(
            _runs.id == run_id,
            _runs.status == RUNNING,
            _runs.chunks_done >= _runs.chunks_total,
        )
        .values(status=ASSEMBLING)
        .returning(_runs.id)
    ).first()
    if won is not None:
        _mirror_progress(conn, run_id)
    return won is not None


def iter_chunk_results(conn: sa.Connection, run_id: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """Chunk results in chunk order, fetched in keyset batches (bounded memory)."""
    after = -1
    while True:
        batch = conn.execute(
            sa.select(_chunks.chunk_index, _chunks.data)
            .where(_chunks.run_id == run_id, _chunks.chunk_index > after)
            .order_by(_chunks.chunk_index)
            .limit(RESULT_BATCH)
        ).all()
        if not batch:
            return
        for row in batch:
            yield row.chunk_index, row.data
        after = batch[-1].chunk_index


def finish_run(
    conn: sa.Connection,
    run_id: int,
    *,
    file_path: str,
    size_bytes: int,
    now: datetime,
    expires_at: datetime | None = None,
) -> bool:
    """`assembling → succeeded` with where the file is; False if someone else finished.
    `expires_at` is when the retention pruner may delete the run and its file."""
    done = conn.execute(
        sa.update(report_runs)
        .where(_runs.id == run_id, _runs.status == ASSEMBLING)
        .values(
            status=SUCCEEDED,
            file_path=file_path,
            size_bytes=size_bytes,
            finished_at=now,
            expires_at=expires_at,
            error=None,
        )
        .returning(_runs.id)
    ).first()
    if done is not None:
        _mirror_progress(conn, run_id)
    return done is not None


def fail_run(conn: sa.Connection, run_id: int, *, error: str, now: datetime) -> bool:
    """A chunk gave up (or assembly failed for good): the run is `failed` with the error."""
    done = conn.execute(
        sa.update(report_runs)
        .where(_runs.id == run_id, _runs.status.in_([RUNNING, ASSEMBLING]))
        .values(status=FAILED, error=sanitize_error(error), finished_at=now)
        .returning(_runs.id)
    ).first()
    if done is not None:
        _mirror_progress(conn, run_id)
    return done is not None


def chunk_jobs(conn: sa.Connection, run_id: int) -> list[dict[str, Any]]:
    """The chunk jobs of a run (latest retry of each chunk last), without payloads."""
    prefix = f"report:{run_id}:chunk:"
    rows = conn.execute(
        sa.select(
            jobs.c.id,
            jobs.c.status,
            jobs.c.attempts,
            jobs.c.idempotency_key,
            jobs.c.last_error,
            jobs.c.retried_from_id,
            jobs.c.resolution,
        )
        .where(
            jobs.c.job_type == CHUNK_JOB_TYPE,
            jobs.c.idempotency_key.like(prefix + "%"),
        )
        .order_by(jobs.c.id)
    )
    return [dict(row._mapping) for row in rows]


def retry_failed_chunks(
    conn: sa.Connection, run_id: int, *, actor: str, now: datetime
) -> list[int]:
    """Requeue every dead chunk of the run as a new job (the dead one is marked
    `requeued`); the run goes back to `running`. Returns the new job ids."""
    run = require_run(conn, run_id)
    if run["status"] in (SUCCEEDED, CANCELLED):
        raise ConflictError(f"report run {run_id} is {run['status']}; nothing to retry")
    dead = [
        row
        for row in chunk_jobs(conn, run_id)
        if row["status"] == JobStatus.DEAD.value and row["resolution"] is None
    ]
    done = requeue_dead(
        conn,
        [row["id"] for row in dead],
        actor=actor,
        reason="retry failed report chunks",
        now=now,
        action=AuditAction.REPORT_RETRY_CHUNK,
        subject=f"report_run:{run_id}",
    )
    new_ids = list(done.new_ids.values())
    if new_ids:
        conn.execute(
            sa.update(report_runs)
            .where(_runs.id == run_id, _runs.status == FAILED)
            .values(status=RUNNING, error=None, finished_at=None)
        )
        _mirror_progress(conn, run_id)
    return new_ids


def cancel_remaining(conn: sa.Connection, run_id: int, *, actor: str, now: datetime) -> list[int]:
    """Cancel the run's chunks that have not run yet and mark the run `cancelled`.
    Chunks already running finish, but nothing is assembled. Returns cancelled job ids."""
    run = require_run(conn, run_id)
    if run["status"] in (SUCCEEDED, CANCELLED):
        raise ConflictError(f"report run {run_id} is already {run['status']}")
    chunks = chunk_jobs(conn, run_id)
    pending = [row["id"] for row in chunks if row["status"] in sql_values(CANCELLABLE)]
    # The assembly waits for the batch of chunks: it will not be needed.
    pending += waiting_success_callbacks(conn, [row["id"] for row in chunks])
    cancelled = cancel(
        conn,
        pending,
        actor=actor,
        reason=f"cancel report run {run_id}",
        now=now,
        subject=f"report_run:{run_id}",
    )
    conn.execute(
        sa.update(report_runs)
        .where(_runs.id == run_id, _runs.status.in_([RUNNING, ASSEMBLING, FAILED]))
        .values(status=CANCELLED, finished_at=now)
    )
    audit.record(
        conn,
        actor=actor,
        action=AuditAction.REPORT_CANCEL,
        job_id=run["job_id"],
        subject=f"report_run:{run_id}",
        reason=f"cancelled {len(cancelled)} pending chunk(s)",
        now=now,
    )
    _mirror_progress(conn, run_id)
    return cancelled
