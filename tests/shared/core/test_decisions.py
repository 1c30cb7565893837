"""Operator decisions: one requeue-as-new-job path for triage and report chunks, each
audited in its own transaction; progress writes are fenced like every worker write."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.audit import AuditAction, audit_log
from jobdesk.shared.core.claim import claim
from jobdesk.shared.core.decisions import cancel, ignore_dead, requeue_dead
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.states import JobStatus, Resolution
from jobdesk.shared.core.transitions import record_progress
from jobdesk.shared.reports.runs import CHUNK_JOB_TYPE, create_run, retry_failed_chunks
from tests.factories import job_row, make_job

NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)


def dead(conn: sa.Connection, **fields: object) -> int:
    values = {
        "job_type": "email.send",
        "status": JobStatus.DEAD.value,
        "attempts": 5,
        "finished_at": NOW,
        "group_key": "user:42",
        "idempotency_key": "welcome:42",
        **fields,
    }
    return make_job(conn, **values)


def audit_rows(conn: sa.Connection) -> list[sa.Row]:  # type: ignore[type-arg]
    return list(conn.execute(sa.select(audit_log).order_by(audit_log.c.id)))


def test_requeue_copies_everything_a_retry_needs_and_audits_it(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        old = dead(conn, queue="email", priority=2, max_attempts=7, timeout_seconds=9.0)
        done = requeue_dead(conn, [old], actor="ana", reason="smtp is back", now=NOW)
        new = done.new_ids[old]
        copy, original = job_row(conn, new), job_row(conn, old)
        rows = audit_rows(conn)
    assert done.unknown_type == ()
    assert copy.status == JobStatus.QUEUED.value
    assert copy.retried_from_id == old
    for column in ("job_type", "queue", "payload", "priority", "max_attempts",
                   "timeout_seconds", "group_key", "idempotency_key"):  # fmt: skip
        assert getattr(copy, column) == getattr(original, column), column
    assert (original.status, original.resolution, original.resolved_by) == (
        JobStatus.DEAD.value,
        Resolution.REQUEUED.value,
        "ana",
    )
    assert [(r.action, r.job_id, r.new_job_id, r.reason) for r in rows] == [
        (AuditAction.RETRY.value, old, new, "smtp is back")
    ]


def test_requeue_twice_retries_once(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        old = dead(conn)
        first = requeue_dead(conn, [old], actor="ana", reason=None, now=NOW)
        second = requeue_dead(conn, [old], actor="bob", reason=None, now=NOW)
    assert list(first.new_ids) == [old]
    assert second.new_ids == {}


def test_requeue_refuses_types_no_worker_runs(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        old = dead(conn, job_type="gone.away")
        done = requeue_dead(conn, [old], actor="ana", reason=None, now=NOW)
        assert job_row(conn, old).resolution is None
    assert done.new_ids == {}
    assert done.unknown_type == (old,)


def test_report_chunk_retry_takes_the_same_path_group_key_included(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        run_id = create_run(
            conn, job_id=None, report="activity", params={}, requested_by="ana", now=NOW
        )
        chunk = dead(
            conn,
            job_type=CHUNK_JOB_TYPE,
            queue="reports",
            group_key=f"report:{run_id}",
            idempotency_key=f"report:{run_id}:chunk:0",
        )
        [new] = retry_failed_chunks(conn, run_id, actor="ana", now=NOW)
        copy = job_row(conn, new)
        rows = audit_rows(conn)
    assert copy.group_key == f"report:{run_id}"
    assert copy.retried_from_id == chunk
    assert [(r.action, r.job_id, r.new_job_id, r.subject) for r in rows] == [
        (AuditAction.REPORT_RETRY_CHUNK.value, chunk, new, f"report_run:{run_id}")
    ]


def test_ignore_and_cancel_write_their_audit_rows(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        old = dead(conn)
        waiting = make_job(conn, status=JobStatus.QUEUED.value)
        assert ignore_dead(conn, [old], actor="ana", reason="duplicate", now=NOW) == [old]
        assert cancel(conn, [waiting, old], actor="bob", reason="not needed", now=NOW) == [waiting]
        rows = audit_rows(conn)
    assert [(r.action, r.job_id, r.actor) for r in rows] == [
        (AuditAction.IGNORE.value, old, "ana"),
        (AuditAction.CANCEL.value, waiting, "bob"),
    ]


def test_an_unknown_audit_action_is_refused_by_the_database(engine: sa.Engine) -> None:
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
        conn.execute(sa.insert(audit_log).values(actor="x", action="report.cancelled", at=NOW))


def test_progress_is_fenced_by_the_lease_token(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        make_job(conn, next_run_at=NOW - timedelta(seconds=1))
        [held] = claim(conn, worker_id="w1", limit=1, now=NOW, lease_seconds=30)
    stale = held.ref.__class__(held.id, held.lease_token + 1, held.attempt, "w0")
    with engine.begin() as conn:
        assert record_progress(conn, held.ref, {"done": 3}) is True
        assert record_progress(conn, stale, {"done": 99}) is False
        progress = conn.execute(sa.select(jobs.c.progress).where(jobs.c.id == held.id)).scalar()
    assert progress == {"done": 3}
