"""The job counts PostgreSQL keeps with triggers equal a fresh count of the jobs table after
every kind of write (worker, triage, pruning, plain SQL, rollbacks, TRUNCATE), compaction
never changes them, and the readers built on them answer as the direct queries do."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import NewJob, PermanentError, enqueue, enqueue_many
from jobdesk.shared.core import job_counts
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.db import make_engine
from jobdesk.shared.core.decisions import cancel
from jobdesk.shared.core.masking import fingerprint
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.states import JobStatus
from jobdesk.shared.operator.commands.triage import ignore_dead, retry_dead
from jobdesk.shared.operator.filters import JobFilters
from jobdesk.shared.operator.queries import dead_letters, stats
from jobdesk.shared.retention.pruning import prune_jobs_batch
from jobdesk.shared.schema import metadata
from jobdesk.shared.settings import Settings
from jobdesk.worker.context import JobContext
from jobdesk.worker.registry import Registry
from jobdesk.worker.registry import job as job_decorator
from jobdesk.worker.testing import drain
from tests.factories import make_job

pytestmark = pytest.mark.postgresql_only

Key = tuple[str, str, str, bool, str | None]


def actual(conn: sa.Connection) -> Counter[Key]:
    dead_fp = sa.case((jobs.c.status == "dead", jobs.c.error_fingerprint))
    resolved = jobs.c.resolution.is_not(None)
    query = sa.select(
        jobs.c.status, jobs.c.queue, jobs.c.job_type, resolved, dead_fp, sa.func.count()
    ).group_by(jobs.c.status, jobs.c.queue, jobs.c.job_type, resolved, dead_fp)
    return Counter({tuple(row[:5]): row[5] for row in conn.execute(query)})  # type: ignore[misc]


def kept(conn: sa.Connection) -> Counter[Key]:
    return Counter(
        {
            (g.status, g.queue, g.job_type, g.resolved, g.error_fingerprint): g.count
            for g in job_counts.group_counts(conn)
        }
    )


def assert_exact(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        assert kept(conn) == actual(conn)


def delta_rows(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(sa.select(sa.func.count()).select_from(job_counts.job_counts)).scalar_one()
        )


def workload_registry() -> Registry:
    reg = Registry()

    @job_decorator("c.ok", target=reg, queue="counted")
    def ok(payload: dict[str, Any], ctx: JobContext) -> None:
        return None

    @job_decorator("c.bad", target=reg, queue="counted", max_attempts=2)
    def bad(payload: dict[str, Any], ctx: JobContext) -> None:
        raise PermanentError(f"no such account {payload.get('n', 0)}")

    @job_decorator("c.flaky", target=reg, queue="counted", max_attempts=3)
    def flaky(payload: dict[str, Any], ctx: JobContext) -> None:
        raise ConnectionError("reset by peer")

    return reg


def test_counts_stay_exact_through_every_kind_of_write(engine: sa.Engine) -> None:
    reg = workload_registry()
    with engine.begin() as conn:
        enqueue(conn, "c.ok", {"n": 1})
        enqueue(conn, "c.ok", {"n": 1}, idempotency_key="same")
        enqueue(conn, "c.ok", {"n": 2}, idempotency_key="same")  # a duplicate: no new row
        enqueue_many(conn, [NewJob("c.bad", {"n": i}) for i in range(3)])
        enqueue_many(conn, [NewJob("c.flaky", {}), NewJob("c.ok", {}, queue="other")])
        # the documented plain-SQL insert from any language
        conn.exec_driver_sql(
            "INSERT INTO jobdesk_jobs (job_type, payload) VALUES ('c.ok', '{}'), ('c.ok', '{}')"
        )
    assert_exact(engine)
    with engine.connect() as conn:
        now = db_now(conn)  # after the inserts: every job is due
    drained = drain(engine, registry=reg, now=now)  # claims, completions, dead jobs, a retry
    assert drained.by_kind == {"succeeded": 5, "permanent": 3, "failed": 1}
    assert_exact(engine)
    before = delta_rows(engine)
    with engine.begin() as conn:  # in place (a heartbeat, progress): no delta at all
        conn.execute(sa.update(jobs).values(updated_at=now, progress={"done": 1}))
    assert delta_rows(engine) == before
    with engine.connect() as conn:
        dead = list(conn.execute(sa.select(jobs.c.id).where(jobs.c.status == "dead")).scalars())
        flaky = conn.execute(sa.select(jobs.c.id).where(jobs.c.status == "failed")).scalar_one()
    with engine.begin() as conn:
        ignore_dead(conn, dead[0], actor="ada", reason="known", now=now)
        retry_dead(conn, dead[1], actor="ada", now=now)
        cancel(conn, [flaky], actor="ada", reason="stop", now=now)
    assert_exact(engine)
    with engine.connect() as conn, conn.begin():  # a rolled-back change leaves no trace
        conn.execute(sa.update(jobs).values(status="cancelled"))
        conn.rollback()
    assert_exact(engine)
    with engine.begin() as conn:
        prune_jobs_batch(conn, JobStatus.SUCCEEDED, now + timedelta(days=1))
        prune_jobs_batch(conn, JobStatus.DEAD, now + timedelta(days=1))
        conn.execute(sa.delete(jobs).where(jobs.c.queue == "other"))
    assert_exact(engine)
    with engine.begin() as conn:
        job_counts.compact(conn)
    assert_exact(engine)
    with engine.begin() as conn:
        conn.exec_driver_sql("TRUNCATE jobdesk_jobs CASCADE")
    with engine.connect() as conn:
        assert kept(conn) == Counter()


def test_compaction_folds_to_one_row_per_group_and_keeps_concurrent_deltas(
    engine: sa.Engine,
) -> None:
    with engine.begin() as conn:
        for i in range(30):
            make_job(conn, job_type="c.ok", queue="q", status="queued" if i % 3 else "succeeded")
    with engine.begin() as conn:
        conn.execute(sa.update(jobs).where(jobs.c.status == "queued").values(status="running"))
    assert delta_rows(engine) > 2
    # a delta committed while a compaction is open is not folded into it, nor lost
    with engine.connect() as first:
        with first.begin():
            folded = job_counts.compact(first)
            with engine.begin() as other:
                make_job(other, job_type="c.ok", queue="q")
        assert folded == 2
    assert_exact(engine)
    with engine.begin() as conn:
        assert job_counts.compact(conn) == 3
    assert delta_rows(engine) == 3
    assert_exact(engine)


def test_two_compactors_at_once_count_nothing_twice(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        for _ in range(50):
            make_job(conn, job_type="c.ok", queue="q")
    errors: list[BaseException] = []

    def compact() -> None:
        try:
            for _ in range(20):
                with engine.begin() as conn:
                    job_counts.compact(conn)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=compact) for _ in range(3)]
    for thread in threads:
        thread.start()
    for _ in range(20):
        with engine.begin() as conn:
            make_job(conn, job_type="c.ok", queue="q", status="running")
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert_exact(engine)


def test_create_all_installs_the_triggers_too(pg_url: str) -> None:
    name = "jobdesk_counts_create_all"
    admin = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.make_url(pg_url).set(database=name).render_as_string(hide_password=False)
    engine = make_engine(url, settings=Settings())
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        metadata.create_all(engine)
        with engine.begin() as conn:
            make_job(conn, job_type="c.ok")
        assert_exact(engine)
        with engine.connect() as conn:
            assert sum(g.count for g in job_counts.group_counts(conn)) == 1
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)


def dead(conn: sa.Connection, error: str, job_type: str, minutes_ago: int) -> int:
    return make_job(
        conn,
        job_type=job_type,
        queue="q",
        status="dead",
        attempts=1,
        last_error=error,
        error_fingerprint=fingerprint(error),
        finished_at=NOW - timedelta(minutes=minutes_ago),
    )


def test_readers_answer_as_the_direct_queries(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        for i in range(6):
            dead(conn, f"HTTP 503 from crm (request {i})", "webhook.deliver", 10 + i)
        dead(conn, "HTTP 503 from crm (request 99)", "email.send", 3)
        ignored = dead(conn, "KeyError: 'id'", "email.send", 5)
        dead(conn, "KeyError: 'id'", "email.send", 7)
        make_job(  # a dead job without an error: the group without a fingerprint
            conn, job_type="email.send", queue="q", status="dead", attempts=1, finished_at=NOW
        )
        make_job(conn, job_type="c.ok", queue="q", next_run_at=NOW - timedelta(minutes=3))
        make_job(
            conn,
            job_type="c.ok",
            queue="q",
            status="failed",
            attempts=1,
            next_run_at=NOW - timedelta(hours=2),
        )
        make_job(conn, job_type="c.ok", queue="r", next_run_at=NOW + timedelta(hours=1))
        ignore_dead(conn, ignored, actor="ada", reason="known", now=NOW)
    everything = JobFilters(since=NOW - timedelta(days=365), time_field="finished")
    with engine.connect() as conn:
        summary = dead_letters.dead_groups(conn, JobFilters(), now=NOW)
        scanned = dead_letters.dead_groups(conn, everything, now=NOW)  # the grouping scan
        assert summary == scanned
        assert summary.total_jobs == 9
        assert [g.count for g in summary.groups] == [7, 1, 1]
        assert summary.groups[0].types == {"webhook.deliver": 6, "email.send": 1}
        assert summary.groups[0].first_seen == NOW - timedelta(minutes=15)
        assert summary.groups[0].last_seen == NOW - timedelta(minutes=3)
        assert dead_letters.unresolved_dead_count(conn) == 9
        assert stats.oldest_queued_age_by_queue(conn, NOW) == {"q": 180.0}
        assert {
            (r.status, r.queue, r.job_type): r.count
            for r in stats.counts_by_status_queue_type(conn)
        } == {
            ("dead", "q", "webhook.deliver"): 6,
            ("dead", "q", "email.send"): 4,
            ("queued", "q", "c.ok"): 1,
            ("failed", "q", "c.ok"): 1,
            ("queued", "r", "c.ok"): 1,
        }
