"""Claim: order, due times, limits, filters, leases, and per-group serial execution."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.claim import ClaimedJob, claim
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.states import ACTIVE, CLAIMABLE, JobStatus, sql_values
from jobdesk.shared.core.transitions import complete, fail
from tests.factories import job_row, make_job

NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def take(
    engine: sa.Engine, limit: int = 100, now: datetime = NOW, **kw: object
) -> list[ClaimedJob]:
    with engine.begin() as conn:
        return claim(conn, worker_id="w1", limit=limit, now=now, **kw)  # type: ignore[arg-type]


def test_claim_order_is_priority_then_next_run_at_then_id(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        c = make_job(conn, priority=5, next_run_at=at(-10))
        a = make_job(conn, priority=1, next_run_at=at(-1))
        d = make_job(conn, priority=5, next_run_at=at(-10))
        b = make_job(conn, priority=5, next_run_at=at(-100))
        e = make_job(conn, priority=9, next_run_at=at(-1000))
    assert [job.id for job in take(engine)] == [a, b, c, d, e]


def test_limit_takes_the_most_urgent_first(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        ids = [make_job(conn, priority=p, next_run_at=at(-1)) for p in (7, 3, 5, 1, 9)]
    first = take(engine, limit=2)
    assert [job.id for job in first] == [ids[3], ids[1]]
    assert [job.id for job in take(engine, limit=2)] == [ids[2], ids[0]]
    assert [job.id for job in take(engine, limit=2)] == [ids[4]]
    assert take(engine, limit=2) == []


def test_not_yet_due_jobs_wait(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        later = make_job(conn, next_run_at=at(60))
        retrying = make_job(conn, status="failed", attempts=1, next_run_at=at(30))
    assert take(engine) == []
    assert [job.id for job in take(engine, now=at(30))] == [retrying]
    assert [job.id for job in take(engine, now=at(61))] == [later]


def test_only_queued_and_due_failed_jobs_are_claimed(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        wanted = {
            make_job(conn, next_run_at=at(-1)),
            make_job(conn, status="failed", attempts=2, next_run_at=at(-1)),
        }
        for status in ("running", "succeeded", "dead", "cancelled"):
            make_job(conn, status=status, attempts=1, next_run_at=at(-1))
    assert {job.id for job in take(engine)} == wanted


def test_only_listed_queues_and_job_types(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        mail = make_job(conn, queue="email", job_type="email.send", next_run_at=at(-1))
        hook = make_job(conn, queue="webhooks", job_type="webhook.deliver", next_run_at=at(-1))
        report = make_job(conn, queue="reports", job_type="report.generate", next_run_at=at(-1))
        unknown = make_job(conn, queue="email", job_type="email.unknown", next_run_at=at(-1))
    assert take(engine, queues=[]) == []
    assert take(engine, job_types=[]) == []
    assert take(engine, limit=0) == []
    got = take(engine, queues=["email", "webhooks"], job_types=["email.send", "webhook.deliver"])
    assert {job.id for job in got} == {mail, hook}
    assert [job.id for job in take(engine, job_types=["report.generate"])] == [report]
    assert [job.id for job in take(engine)] == [unknown]


def test_claim_counts_the_attempt_and_sets_the_lease(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        job_id = make_job(
            conn,
            job_type="email.send",
            queue="email",
            payload={"to": "ana@example.com"},
            status="failed",
            attempts=2,
            max_attempts=6,
            priority=3,
            next_run_at=at(-1),
            idempotency_key="k1",
            group_key="user:1",
            timeout_seconds=7.5,
        )
    (job,) = take(engine, lease_seconds=45)
    assert (job.id, job.attempt, job.max_attempts, job.priority) == (job_id, 3, 6, 3)
    assert (job.job_type, job.queue, job.payload) == (
        "email.send",
        "email",
        {"to": "ana@example.com"},
    )
    assert (job.idempotency_key, job.group_key, job.timeout_seconds) == ("k1", "user:1", 7.5)
    assert (job.started_at, job.lease_expires_at, job.worker_id) == (NOW, at(45), "w1")
    assert job.ref.id == job_id
    assert job.ref.lease_token == job.lease_token
    assert job.ref.attempt == 3
    with engine.connect() as conn:
        row = job_row(conn, job_id)
    assert (row.status, row.attempts, row.locked_by) == ("running", 3, "w1")
    assert (row.locked_at, row.started_at, row.lease_expires_at) == (NOW, NOW, at(45))
    assert row.lease_token == job.lease_token


def test_each_claim_gets_a_new_fencing_token(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        make_job(conn, next_run_at=at(-1))
        make_job(conn, next_run_at=at(-1))
    first, second = take(engine, limit=1), take(engine, limit=1)
    assert first[0].lease_token != second[0].lease_token


def test_a_row_without_attempts_left_is_skipped_not_breaking_the_claim(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        spent = make_job(conn, attempts=5, max_attempts=5, next_run_at=at(-10))
        fine = make_job(conn, next_run_at=at(-1))
    assert [job.id for job in take(engine)] == [fine]
    with engine.connect() as conn:
        assert job_row(conn, spent).status == "queued"


def test_claim_uses_the_database_clock_by_default(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        due = make_job(conn)  # next_run_at defaults to the database's now
        make_job(conn, next_run_at=datetime.now(UTC) + timedelta(hours=1))
    with engine.begin() as conn:
        assert [job.id for job in claim(conn, worker_id="w", limit=10)] == [due]


def test_database_clock_claim_reports_the_stored_lease_times(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        first, second = make_job(conn), make_job(conn)
    with engine.begin() as conn:
        got = claim(conn, worker_id="w", limit=10, lease_seconds=12.5)
    assert [job.id for job in got] == [first, second]
    with engine.connect() as conn:
        rows = [job_row(conn, job_id) for job_id in (first, second)]
    for job, row in zip(got, rows, strict=True):
        assert job.started_at.utcoffset() == timedelta(0)
        assert (job.started_at, job.lease_expires_at) == (row.started_at, row.lease_expires_at)
        assert job.lease_expires_at - job.started_at == timedelta(seconds=12.5)
        assert abs(job.started_at - datetime.now(UTC)) < timedelta(minutes=1)


# -- groups: at most one running job per group_key, in order ------------------------------


def test_one_running_job_per_group_head_first_other_groups_unblocked(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        a1 = make_job(conn, group_key="a", next_run_at=at(-5))
        a2 = make_job(conn, group_key="a", next_run_at=at(-50))  # due earlier, but behind a1
        b1 = make_job(conn, group_key="b", next_run_at=at(-5))
        free = make_job(conn, next_run_at=at(-5))
    got = take(engine)
    assert sorted(job.id for job in got) == sorted([a1, b1, free])
    assert take(engine) == []  # a2 waits while a1 runs
    a_job = next(job for job in got if job.id == a1)
    with engine.begin() as conn:
        assert complete(conn, a_job.ref, now=NOW)
    assert [job.id for job in take(engine)] == [a2]


def test_group_order_follows_priority_then_id(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        low = make_job(conn, group_key="g", priority=7, next_run_at=at(-1))
        high = make_job(conn, group_key="g", priority=2, next_run_at=at(-1))
        same = make_job(conn, group_key="g", priority=7, next_run_at=at(-1))
    order = []
    for _ in range(3):
        (job,) = take(engine)
        order.append(job.id)
        with engine.begin() as conn:
            complete(conn, job.ref, now=NOW)
    assert order == [high, low, same]


def test_a_retrying_head_keeps_its_group_waiting_a_dead_one_does_not(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        head = make_job(conn, group_key="g", max_attempts=2, next_run_at=at(-5))
        nxt = make_job(conn, group_key="g", next_run_at=at(-5))
    (job,) = take(engine)
    assert job.id == head
    with engine.begin() as conn:
        assert fail(conn, job.ref, error="boom", retry_at=at(600), now=NOW) == JobStatus.FAILED
    assert take(engine) == []  # the group waits for its head's retry
    (job,) = take(engine, now=at(601))
    assert job.id == head
    with engine.begin() as conn:
        assert fail(conn, job.ref, error="boom", retry_at=None, now=at(601)) == JobStatus.DEAD
    assert [job.id for job in take(engine, now=at(602))] == [nxt]


def test_database_refuses_a_second_running_job_in_a_group(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        make_job(conn, group_key="g", status="running", attempts=1)
        other = make_job(conn, group_key="g")
        make_job(conn, group_key="h", status="running", attempts=1)
    with engine.connect() as conn:
        with pytest.raises(sa.exc.IntegrityError):
            conn.execute(
                sa.update(jobs).where(jobs.c.id == other).values(status="running", attempts=1)
            )
        conn.rollback()
    with engine.connect() as conn, pytest.raises(sa.exc.IntegrityError):
        make_job(conn, group_key="g", status="running", attempts=1)


def test_claim_sql_repeats_the_partial_index_predicates_for_the_right_states() -> None:
    # The claim copies the partial indexes' WHERE text so SQLite's planner can use them;
    # this keeps those predicates naming exactly the claimable / active states.
    from jobdesk.shared.core.driver import jobs_sql as queue

    def states(sql: str) -> set[str]:
        return set(re.findall(r"'(\w+)'", sql))

    assert states(queue.CLAIMABLE_SQL) == set(sql_values(CLAIMABLE))
    assert states(queue.ACTIVE_GROUP_SQL) == set(sql_values(ACTIVE))
    assert "group_key IS NOT NULL" in queue.ACTIVE_GROUP_SQL


#: The PostgreSQL claim's parameters for an EXPLAIN (the database's clock, lease 30 s).
CLAIM_PARAMS = {"worker": "w1", "now": None, "lease": 1, "expires": None, "lease_seconds": 30.0}


@pytest.mark.postgresql_only
def test_claim_plan_cost_stays_small_with_every_job_in_one_queue(engine: sa.Engine) -> None:
    # All jobs in one queue and an empty, never-analyzed pause table: the claim's estimate
    # must still be what LIMIT makes it (a few index pages), not the cost of scanning
    # every candidate — past `jit_above_cost` PostgreSQL compiled JIT code on every
    # claim (about half a second each at a 60k backlog).
    from jobdesk import NewJob, enqueue_many
    from jobdesk.shared.core.driver.postgresql_jobs import CLAIM_STATEMENTS

    with engine.begin() as conn:
        enqueue_many(conn, [NewJob("t.noop", {"i": i}) for i in range(5000)])
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        conn.execute(sa.text("ANALYZE jobdesk_jobs"))
    statement = CLAIM_STATEMENTS["", True].text
    params = {**CLAIM_PARAMS, "limit": 10, "job_types": ["t.noop"]}
    with engine.connect() as conn:
        (plan,) = conn.execute(sa.text("EXPLAIN (FORMAT JSON) " + statement), params).one()
    cost = plan[0]["Plan"]["Total Cost"]
    assert cost < 2000, f"claim of 10 estimated at {cost:,.0f}"


@pytest.mark.postgresql_only
def test_the_workers_claim_walks_the_index_even_when_the_table_was_vacuumed_empty(
    db_url: str,
) -> None:
    # A table the pruner emptied and vacuum recorded as empty: the planner's cheapest
    # claim is then a scan of the whole table, and a prepared statement keeps that plan
    # while the next burst fills it (measured: ~1,050 claimed jobs/s instead of ~20k until
    # autovacuum's next ANALYZE). The worker's own engine turns sequential scans off.
    from jobdesk.shared.core.db import make_engine
    from jobdesk.shared.core.driver.postgresql_jobs import CLAIM_STATEMENTS
    from jobdesk.shared.settings import Settings

    plain = make_engine(db_url, settings=Settings())
    worker = make_engine(db_url, settings=Settings(), index_plans=True)
    try:
        with plain.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.execute(sa.text("VACUUM ANALYZE jobdesk_jobs"))
        statement = sa.text("EXPLAIN " + CLAIM_STATEMENTS["", False].text)
        params = {**CLAIM_PARAMS, "limit": 100}
        plans = {}
        for name, engine in (("plain", plain), ("worker", worker)):
            with engine.connect() as conn:
                rows = conn.execute(statement, params).scalars().all()
                plans[name] = "\n".join(rows)
                plans[name + " setting"] = conn.exec_driver_sql("SHOW enable_seqscan").scalar()
    finally:
        plain.dispose()
        worker.dispose()
    assert "Seq Scan on jobdesk_jobs c" in plans["plain"], plans["plain"]
    assert "Seq Scan on jobdesk_jobs" not in plans["worker"], plans["worker"]
    assert "ix_jobdesk_jobs_claimable_any_queue" in plans["worker"]
    assert (plans["plain setting"], plans["worker setting"]) == ("on", "off")


@pytest.mark.slow
@pytest.mark.postgresql_only
@pytest.mark.parametrize("queues", [None, ["webhooks"]], ids=["every queue", "one queue"])
def test_a_burst_after_the_statistics_were_taken_is_claimed_in_index_order(
    engine: sa.Engine, queues: list[str] | None
) -> None:
    # Before the table's first ANALYZE (a new install; autovacuum's comes within a minute
    # or so) the planner thinks a burst of jobs is a handful, so sorting every candidate
    # looks free: measured at 20,000 waiting webhooks, 7-15 ms per claim sorting all of
    # them against 0.3-1.5 ms walking an index in claim order.
    from jobdesk import NewJob, enqueue_many
    from jobdesk.shared.core import claim as queue
    from jobdesk.shared.core.driver.postgresql_jobs import CLAIM_STATEMENTS, NO_SORT

    payloads = [{"endpoint": "crm", "event": "e", "data": {"i": i}} for i in range(20_000)]
    with engine.begin() as conn:
        enqueue_many(conn, [NewJob("webhook.deliver", p, queue="webhooks") for p in payloads])
    params = {**CLAIM_PARAMS, "limit": 10, "job_types": ["webhook.deliver"]}
    if queues is None:
        statement = CLAIM_STATEMENTS["", True].text
    else:
        statement = CLAIM_STATEMENTS["one_queue", True].text
        params["queue"] = queues[0]
    with engine.begin() as conn:
        if queues is None:
            conn.execute(NO_SORT)
        plan = "\n".join(conn.execute(sa.text("EXPLAIN " + statement), params).scalars())
    assert "Sort" not in plan, plan
    with engine.begin() as conn:
        claimed = queue.claim(
            conn, worker_id="w", limit=10, queues=queues, job_types=["webhook.deliver"]
        )
    assert [job.payload["data"]["i"] for job in claimed] == list(range(10))


@pytest.mark.postgresql_only
def test_the_workers_claim_connection_claims_with_sorts_off_in_autocommit(
    engine: sa.Engine,
) -> None:
    # A claim in autocommit has no transaction for a local setting to last in: the
    # worker's claim connection turns sorts off for its session while it claims from
    # every queue, on for a list of queues, and back on before it returns to the pool.
    from jobdesk.shared.core.db import one_statement
    from jobdesk.shared.core.driver import driver
    from jobdesk.worker.resilience import HeldConnection

    held = HeldConnection(one_statement(engine), before_return=driver(engine).end_claim_session)
    seen = []
    for queues in (None, None, ["webhooks"], None):
        with held.begin() as conn:
            claim(conn, worker_id="w", limit=1, queues=queues)
            seen.append(conn.execute(sa.text("SHOW enable_sort")).scalar())
            # No JIT either, whatever the claim's shape (see `JIT_OFF`).
            assert conn.execute(sa.text("SHOW jit")).scalar() == "off"
    assert seen == ["off", "off", "on", "off"]
    with held.begin() as conn:
        session = conn.connection.dbapi_connection
    held.close()
    assert session is not None
    with session.cursor() as cursor:
        cursor.execute("SHOW enable_sort")
        assert cursor.fetchone() == ("on",)
        cursor.execute("SHOW jit")
        assert cursor.fetchone() == ("on",)


@pytest.mark.postgresql_only
def test_behind_pgbouncer_an_autocommit_claim_leaves_the_session_to_the_role(
    engine: sa.Engine,
) -> None:
    # With `JOBDESK_DB_TIMEOUTS_FROM_ROLE` the claim runs in autocommit through PgBouncer,
    # where a `SET` would stay on a server connection that other clients get next.
    from jobdesk.shared.core.driver.postgresql_engine import POOLED

    pooled = engine.execution_options(**{POOLED: True}, isolation_level="AUTOCOMMIT")
    with pooled.connect() as conn:
        for queues in (None, ["webhooks"], None):
            claim(conn, worker_id="w", limit=1, queues=queues)
            assert conn.execute(sa.text("SHOW jit")).scalar() == "on"
            assert conn.execute(sa.text("SHOW enable_sort")).scalar() == "on"
