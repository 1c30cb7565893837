"""The pruner deletes by policy, in batches, and never touches unresolved dead letters."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.core.models import job_attempts, jobs
from jobdesk.shared.core.states import JobStatus
from jobdesk.shared.reports.models import report_runs
from jobdesk.shared.retention.pruning import tombstone
from jobdesk.shared.settings import Settings, SettingsError
from jobdesk.shared.settings.retention import RetentionPolicy
from jobdesk.shared.webhooks.models import webhook_deliveries
from jobdesk.worker.maintenance.pruner import run_once
from tests.factories import env_settings, make_job
from tests.shared.alerts.helpers import NOW, ago


def finished(
    conn: sa.Connection, status: JobStatus, days: float, n: int = 1, **kw: object
) -> list[int]:
    when = ago(days=days)
    return [
        make_job(conn, status=status.value, finished_at=when, updated_at=when, **kw)
        for _ in range(n)
    ]


def remaining(conn: sa.Connection) -> dict[str, int]:
    rows = conn.execute(sa.select(jobs.c.status, sa.func.count()).group_by(jobs.c.status))
    return {str(status): int(n) for status, n in rows}


def test_prunes_by_policy_in_batches_and_keeps_unresolved_dead_letters(
    engine: sa.Engine, tmp_path: Path
) -> None:
    S, C, D = JobStatus.SUCCEEDED, JobStatus.CANCELLED, JobStatus.DEAD
    expired_file = tmp_path / "report-1.csv"
    expired_file.write_text("a,b\n")
    kept_file = tmp_path / "report-2.csv"
    kept_file.write_text("a,b\n")
    with engine.begin() as conn:
        old_ok = finished(conn, S, 8, 25)
        finished(conn, S, 6, 3)
        finished(conn, C, 31, 2)
        finished(conn, C, 29, 1)
        finished(conn, D, 400, 3)  # unresolved: kept forever
        resolved_old = finished(
            conn, D, 100, 4, resolution="ignored", resolved_by="ana", resolved_at=ago(days=91)
        )
        finished(conn, D, 100, 1, resolution="fixed", resolved_by="ana", resolved_at=ago(days=10))
        retry = make_job(conn, retried_from_id=resolved_old[0])
        conn.execute(
            sa.insert(job_attempts).values(
                job_id=old_ok[0], attempt=1, outcome="succeeded", finished_at=ago(days=8)
            )
        )
        conn.execute(
            sa.insert(webhook_deliveries).values(
                job_id=old_ok[0],
                attempt=1,
                endpoint="crm",
                webhook_id="msg_1",
                url="http://127.0.0.1/x",
                outcome="delivered",
            )
        )
        conn.execute(sa.insert(audit_log).values(at=ago(days=900), actor="ana", action="retry"))
        conn.execute(
            sa.insert(report_runs).values(
                report="activity", file_path=str(expired_file), expires_at=ago(hours=1)
            )
        )
        conn.execute(
            sa.insert(report_runs).values(
                report="activity", file_path=str(kept_file), expires_at=NOW.replace(year=2027)
            )
        )
        conn.execute(
            sa.insert(report_runs).values(
                report="activity", file_path=str(tmp_path / "gone.csv"), expires_at=ago(days=1)
            )
        )

    result = run_once(engine, NOW, env_settings({"retention_batch_size": "10"}))

    assert result.deleted == {
        "succeeded_jobs": 25,
        "cancelled_jobs": 2,
        "resolved_dead_letters": 4,
        "expired_reports": 2,
    }
    assert result.batches["succeeded_jobs"] == 3  # 10 + 10 + 5 rows
    assert result.files_removed == 1
    assert not expired_file.exists()
    assert kept_file.exists()
    with engine.connect() as conn:
        assert remaining(conn) == {"succeeded": 3, "cancelled": 1, "dead": 4, "queued": 1}
        unresolved = conn.execute(
            sa.select(sa.func.count()).where(jobs.c.status == "dead", jobs.c.resolution.is_(None))
        ).scalar()
        assert unresolved == 3
        for table in (job_attempts, webhook_deliveries):
            assert conn.execute(sa.select(sa.func.count()).select_from(table)).scalar() == 0
        # The retry still names the pruned dead job, and its tombstone says what it was.
        retried = conn.execute(sa.select(jobs.c.retried_from_id).where(jobs.c.id == retry))
        assert retried.scalar() == resolved_old[0]
        kept = tombstone(conn, resolved_old[0])
        assert kept is not None
        assert (kept["status"], kept["resolution"], kept["resolved_by"]) == (
            "dead",
            "ignored",
            "ana",
        )
        assert conn.execute(sa.select(sa.func.count()).select_from(audit_log)).scalar() == 1
        assert conn.execute(sa.select(sa.func.count()).select_from(report_runs)).scalar() == 1

    again = run_once(engine, NOW, env_settings({"retention_batch_size": "10"}))
    assert again.total == 0


def test_max_batches_bounds_one_run(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        finished(conn, JobStatus.SUCCEEDED, 10, 7)
    settings = env_settings({"retention_batch_size": "2", "retention_max_batches": "2"})
    first = run_once(engine, NOW, settings)
    assert first.deleted == {"succeeded_jobs": 4}
    assert first.unfinished == ["succeeded_jobs"]
    second = run_once(engine, NOW, settings)
    assert second.deleted == {"succeeded_jobs": 3}
    assert second.unfinished == []


def test_audit_and_alert_retention_only_when_configured(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(sa.insert(audit_log).values(at=ago(days=400), actor="ana", action="retry"))
        conn.execute(sa.insert(audit_log).values(at=ago(days=10), actor="ana", action="ignore"))
    assert run_once(engine, NOW, Settings()).total == 0
    result = run_once(engine, NOW, env_settings({"retention_audit_days": "365"}))
    assert result.deleted == {"audit_entries": 1}


def test_policies_can_be_switched_off(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        finished(conn, JobStatus.SUCCEEDED, 100, 2)
    result = run_once(engine, NOW, env_settings({"retention_succeeded_days": "never"}))
    assert result.total == 0


@pytest.mark.parametrize(
    ("key", "raw", "message"),
    [
        ("retention_succeeded_days", "soon", "expected a number of days or 'never'"),
        ("retention_succeeded_days", "0", "> 0"),
        ("retention_batch_size", "0", "must be >= 1"),
        ("retention_sucseeded_days", "3", "did you mean JOBDESK_RETENTION_SUCCEEDED_DAYS"),
    ],
)
def test_bad_retention_settings_name_the_variable(key: str, raw: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message) as info:
        env_settings({key: raw})
    assert f"JOBDESK_{key.upper()}" in str(info.value)


def test_defaults() -> None:
    policy = RetentionPolicy()
    assert (policy.succeeded_days, policy.cancelled_days, policy.resolved_dead_days) == (7, 30, 90)
    assert policy.audit_days is None
    assert policy.alerts_days is None
