"""A job's attempt rows go with the job — by trigger, since `job_id` is no foreign key."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.claim import claim
from jobdesk.shared.core.models import job_attempts, jobs
from jobdesk.shared.core.states import JobStatus
from jobdesk.shared.core.transitions import Completion, complete_many, fail
from jobdesk.shared.retention.pruning import prune_jobs_batch
from tests.factories import make_job

NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)


def finished_jobs(engine: sa.Engine, count: int) -> list[int]:
    """`count` jobs, each with a failed attempt and then a succeeded one."""
    with engine.begin() as conn:
        for _ in range(count):
            make_job(conn, next_run_at=NOW)
    for round_ in range(2):
        with engine.begin() as conn:
            held = claim(conn, worker_id="w1", limit=count, now=NOW)
            assert len(held) == count
            if round_ == 0:
                for job in held:
                    fail(conn, job.ref, error="Boom", retry_at=NOW, now=NOW)
            else:
                complete_many(conn, [Completion(job) for job in held], now=NOW)
    with engine.connect() as conn:
        return list(conn.execute(sa.select(jobs.c.id).order_by(jobs.c.id)).scalars())


def attempt_job_ids(engine: sa.Engine) -> list[int]:
    with engine.connect() as conn:
        query = sa.select(job_attempts.c.job_id).order_by(job_attempts.c.job_id)
        return list(conn.execute(query).scalars())


def test_deleting_jobs_deletes_their_attempts_and_no_others(engine: sa.Engine) -> None:
    first, second, third = finished_jobs(engine, 3)
    assert attempt_job_ids(engine) == [first, first, second, second, third, third]
    with engine.begin() as conn:
        # Plain SQL, as an app or an operator would write it.
        conn.exec_driver_sql(f"DELETE FROM jobdesk_jobs WHERE id IN ({first}, {third})")
    assert attempt_job_ids(engine) == [second, second]


def test_a_rolled_back_delete_keeps_the_attempts(engine: sa.Engine) -> None:
    (only,) = finished_jobs(engine, 1)
    with engine.connect() as conn, conn.begin() as transaction:
        conn.execute(sa.delete(jobs).where(jobs.c.id == only))
        transaction.rollback()
    assert attempt_job_ids(engine) == [only, only]


def test_pruning_takes_the_attempts_of_pruned_jobs(engine: sa.Engine) -> None:
    ids = finished_jobs(engine, 4)
    with engine.begin() as conn:
        conn.execute(
            sa.update(jobs)
            .where(jobs.c.id.in_(ids[:2]))
            .values(finished_at=datetime(2030, 1, 1, tzinfo=UTC))
        )
    with engine.begin() as conn:
        batch = prune_jobs_batch(conn, JobStatus.SUCCEEDED, datetime(2030, 3, 1, tzinfo=UTC))
    assert batch.deleted == 2
    assert attempt_job_ids(engine) == [ids[2], ids[2], ids[3], ids[3]]


@pytest.mark.postgresql_only
def test_truncating_the_jobs_empties_the_attempts(engine: sa.Engine) -> None:
    finished_jobs(engine, 2)
    with engine.begin() as conn:
        conn.exec_driver_sql("TRUNCATE jobdesk_jobs CASCADE")
    assert attempt_job_ids(engine) == []


def test_attempts_have_no_foreign_key_to_the_jobs(engine: sa.Engine) -> None:
    # The constraint's per-row check was a fifth of every completion's server time.
    assert sa.inspect(engine).get_foreign_keys("jobdesk_job_attempts") == []
