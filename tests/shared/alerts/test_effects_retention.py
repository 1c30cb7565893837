"""Retention of the effects ledger: a job's rows go with the job, a retry that stays
takes over its original's done effects, rows that belong to no job go by age."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from jobdesk.shared.core.models import effects, jobs
from jobdesk.shared.core.states import JobStatus
from jobdesk.shared.retention.pruning import describe
from jobdesk.shared.settings import Settings
from jobdesk.shared.settings.retention import RetentionPolicy
from jobdesk.worker.maintenance.pruner import run_once
from tests.factories import env_settings, make_job
from tests.shared.alerts.helpers import NOW, ago


def finished(conn: sa.Connection, status: JobStatus, days: float, **kw: object) -> int:
    when = ago(days=days)
    return make_job(conn, status=status.value, finished_at=when, updated_at=when, **kw)


def effect(
    conn: sa.Connection,
    key: str,
    job_id: int | None,
    *,
    state: str = "done",
    created: datetime = NOW,
) -> None:
    conn.execute(
        sa.insert(effects).values(
            key=key, job_id=job_id, state=state, created_at=created, detail={"by": job_id}
        )
    )


def ledger(conn: sa.Connection) -> dict[str, int | None]:
    rows = conn.execute(sa.select(effects.c.key, effects.c.job_id).order_by(effects.c.key))
    return {str(row.key): row.job_id for row in rows}


def test_pruning_a_job_prunes_its_effects_and_kept_jobs_keep_theirs(engine: sa.Engine) -> None:
    S, D = JobStatus.SUCCEEDED, JobStatus.DEAD
    resolved = {"resolution": "requeued", "resolved_by": "ana", "resolved_at": ago(days=91)}
    with engine.begin() as conn:
        old = [finished(conn, S, 8) for _ in range(5)]
        recent = finished(conn, S, 6)
        unresolved = finished(conn, D, 400)
        for n, job_id in enumerate(old):
            effect(conn, f"email:old-{n}", job_id, created=ago(days=8))
        effect(conn, "webhook:old-0", old[0], state="reserved", created=ago(days=8))
        effect(conn, "email:recent", recent, created=ago(days=6))
        effect(conn, "email:unresolved", unresolved, created=ago(days=400))
        # A dead letter retried twice: the original and the first retry go, the second
        # retry (still queued) carries the key and must keep skipping their effects.
        first = finished(conn, D, 100, idempotency_key="charge-7", **resolved)
        second = finished(
            conn, D, 95, idempotency_key="charge-7", retried_from_id=first, **resolved
        )
        third = make_job(conn, idempotency_key="charge-7", retried_from_id=second)
        effect(conn, "charge:7", first, created=ago(days=100))
        effect(conn, "receipt:7", second, created=ago(days=95))
        effect(conn, "charge:7:lock", first, state="reserved", created=ago(days=100))

    result = run_once(engine, NOW, env_settings({"retention_batch_size": "2"}))

    assert result.deleted == {
        "succeeded_jobs": 5,
        "resolved_dead_letters": 2,
        "job_effects": 7,  # five emails, a stale reservation of each pruned job
    }
    with engine.connect() as conn:
        assert ledger(conn) == {
            "charge:7": third,
            "email:recent": recent,
            "email:unresolved": unresolved,
            "receipt:7": third,
        }
        left = set(conn.execute(sa.select(jobs.c.id)).scalars())
    assert left == {recent, unresolved, third}
    assert run_once(engine, NOW, Settings()).total == 0


def test_effects_without_a_job_go_by_age(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        kept_job = finished(conn, JobStatus.DEAD, 400)
        effect(conn, "outside:old-1", None, created=ago(days=31))
        effect(conn, "outside:old-2", None, created=ago(days=45))
        effect(conn, "outside:old-3", None, created=ago(days=300))
        effect(conn, "outside:new", None, created=ago(days=29))
        # Left by a job deleted by hand (or pruned before the ledger was pruned with it).
        effect(conn, "gone:old", kept_job + 1000, created=ago(days=40))
        effect(conn, "gone:new", kept_job + 1001, created=ago(days=2))
        effect(conn, "kept:old", kept_job, created=ago(days=400))

    assert run_once(engine, NOW, env_settings({"retention_effects_days": "never"})).total == 0
    result = run_once(engine, NOW, env_settings({"retention_batch_size": "2"}))

    assert result.deleted == {"unowned_effects": 4}
    assert result.batches == {"unowned_effects": 2}
    with engine.connect() as conn:
        assert ledger(conn) == {
            "gone:new": kept_job + 1001,
            "kept:old": kept_job,
            "outside:new": None,
        }
    shorter = run_once(engine, NOW, env_settings({"retention_effects_days": "1"}))
    assert shorter.deleted == {"unowned_effects": 2}


def test_the_policy_lists_the_effects_ledger() -> None:
    assert RetentionPolicy().effects_days == 30
    rows = {row["what"]: row for row in describe(RetentionPolicy())}
    assert rows["effects ledger"]["kept"] == "as long as its job"
    assert rows["effects ledger rows without a job"]["kept"] == "30 days"
    assert rows["effects ledger rows without a job"]["env"] == "JOBDESK_RETENTION_EFFECTS_DAYS"
