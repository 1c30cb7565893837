"""The executor's outcome mapping, through `jobdesk.worker.testing.drain` (as the runner)."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import PermanentError, RetryAfter, Snooze, enqueue
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.models import job_attempts, jobs
from jobdesk.shared.core.retry import Schedule
from jobdesk.worker.context import JobContext
from jobdesk.worker.executor import Kind
from jobdesk.worker.registry import Registry, job
from jobdesk.worker.testing import drain


@pytest.fixture
def reg() -> Registry:
    return Registry()


def add(engine: sa.Engine, job_type: str, payload: dict[str, Any] | None = None, **kw: Any) -> int:
    with engine.begin() as conn:
        return enqueue(conn, job_type, payload or {}, **kw)


def row(engine: sa.Engine, job_id: int) -> sa.Row[Any]:
    with engine.connect() as conn:
        return conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).one()


def attempts(engine: sa.Engine, job_id: int) -> list[tuple[int, str, str | None]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(job_attempts.c.attempt, job_attempts.c.outcome, job_attempts.c.error)
            .where(job_attempts.c.job_id == job_id)
            .order_by(job_attempts.c.id)
        )
        return [(r.attempt, r.outcome, r.error) for r in rows]


def test_success_stores_the_result_and_an_attempt_row(engine: sa.Engine, reg: Registry) -> None:
    seen: list[JobContext] = []

    @job("t.ok", target=reg)
    def ok(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
        seen.append(ctx)
        return {"doubled": payload["n"] * 2}

    job_id = add(engine, "t.ok", {"n": 21}, idempotency_key="k:1")
    result = drain(engine, registry=reg)
    assert (result.count, result.succeeded) == (1, 1)
    r = row(engine, job_id)
    assert (r.status, r.result, r.attempts, r.locked_by) == ("succeeded", {"doubled": 42}, 1, None)
    assert attempts(engine, job_id) == [(1, "succeeded", None)]
    assert (seen[0].job_id, seen[0].attempt, seen[0].idempotency_key) == (job_id, 1, "k:1")


def test_exception_retries_with_the_types_backoff(engine: sa.Engine, reg: Registry) -> None:
    @job("t.boom", target=reg, backoff=Schedule.of_seconds([60], jitter=0), max_attempts=2)
    def boom(payload: dict[str, Any], ctx: JobContext) -> None:
        raise ConnectionError("smtp down password=hunter2")

    job_id = add(engine, "t.boom")
    with engine.connect() as conn:
        before = db_now(conn)
    result = drain(engine, registry=reg)
    assert result.by_kind == {"failed": 1}
    r = row(engine, job_id)
    assert r.status == "failed"
    assert timedelta(seconds=59) < r.next_run_at - before < timedelta(seconds=62)
    assert r.last_error.startswith("ConnectionError: smtp down")
    assert "hunter2" not in r.last_error
    # nothing more is due now; at the retry time the last attempt goes dead
    assert drain(engine, registry=reg).count == 0
    drain(engine, registry=reg, now=r.next_run_at + timedelta(seconds=1))
    assert row(engine, job_id).status == "dead"
    assert [a[:2] for a in attempts(engine, job_id)] == [(1, "failed"), (2, "failed")]


def test_permanent_error_is_dead_at_once(engine: sa.Engine, reg: Registry) -> None:
    @job("t.perm", target=reg, max_attempts=5)
    def perm(payload: dict[str, Any], ctx: JobContext) -> None:
        raise PermanentError("no such address")

    job_id = add(engine, "t.perm")
    drain(engine, registry=reg)
    r = row(engine, job_id)
    assert (r.status, r.attempts) == ("dead", 1)
    assert attempts(engine, job_id)[0][:2] == (1, "permanent")


def test_retry_after_is_honoured(engine: sa.Engine, reg: Registry) -> None:
    @job("t.later", target=reg)
    def later(payload: dict[str, Any], ctx: JobContext) -> None:
        raise RetryAfter(7)

    job_id = add(engine, "t.later")
    with engine.connect() as conn:
        before = db_now(conn)
    drain(engine, registry=reg)
    r = row(engine, job_id)
    assert r.status == "failed"
    assert timedelta(seconds=6.5) < r.next_run_at - before < timedelta(seconds=9)


def test_snooze_does_not_count_the_attempt(engine: sa.Engine, reg: Registry) -> None:
    @job("t.snooze", target=reg)
    def snooze(payload: dict[str, Any], ctx: JobContext) -> None:
        raise Snooze(30, "breaker open")

    job_id = add(engine, "t.snooze")
    result = drain(engine, registry=reg)
    assert result.snoozed == 1
    r = row(engine, job_id)
    assert (r.status, r.attempts) == ("queued", 0)
    assert attempts(engine, job_id) == []


def test_zero_second_snooze_does_not_loop(engine: sa.Engine, reg: Registry) -> None:
    @job("t.snooze0", target=reg)
    def snooze0(payload: dict[str, Any], ctx: JobContext) -> None:
        raise Snooze(0)

    job_id = add(engine, "t.snooze0")
    assert drain(engine, registry=reg).snoozed == 1
    assert row(engine, job_id).status == "queued"


def test_hanging_handler_times_out_and_retries(engine: sa.Engine, reg: Registry) -> None:
    @job("t.hang", target=reg, timeout=0.3)
    def hang(payload: dict[str, Any], ctx: JobContext) -> None:
        ctx.cancelled.wait(30)

    job_id = add(engine, "t.hang")
    started = time.monotonic()
    result = drain(engine, registry=reg)
    assert time.monotonic() - started < 5
    assert result.by_kind == {"timeout": 1}
    r = row(engine, job_id)
    assert r.status == "failed"
    assert "timeout" in r.last_error
    assert attempts(engine, job_id)[0][:2] == (1, "timeout")


def test_non_json_result_ends_the_job_without_rerunning_the_handler(
    engine: sa.Engine, reg: Registry
) -> None:
    """The handler did its work; a rerun would repeat it (B12): dead, with the reason."""

    @job("t.setresult", target=reg)
    def bad(payload: dict[str, Any], ctx: JobContext) -> object:
        return {1, 2}

    job_id = add(engine, "t.setresult")
    drain(engine, registry=reg)
    r = row(engine, job_id)
    assert r.status == "dead"
    assert r.last_error.startswith(
        "ResultNotStorable: the handler finished but its set result cannot be stored"
    )


def test_rate_limit_snoozes_without_burning_attempts(engine: sa.Engine, reg: Registry) -> None:
    @job("t.limited", target=reg, rate_limit="2/m")
    def limited(payload: dict[str, Any], ctx: JobContext) -> None:
        return None

    ids = [add(engine, "t.limited", {"i": i}) for i in range(3)]
    result = drain(engine, registry=reg)
    assert (result.succeeded, result.snoozed) == (2, 1)
    statuses = sorted((row(engine, i).status, row(engine, i).attempts) for i in ids)
    assert statuses == [("queued", 0), ("succeeded", 1), ("succeeded", 1)]


def test_only_registered_types_and_chosen_queues_are_run(engine: sa.Engine, reg: Registry) -> None:
    @job("t.mine", target=reg, queue="a")
    def mine(payload: dict[str, Any], ctx: JobContext) -> None:
        return None

    unknown = add(engine, "t.unknown")
    other_queue = add(engine, "t.mine", queue="b")
    mine_id = add(engine, "t.mine")
    result = drain(engine, registry=reg, queues=["a"])
    assert result.ids(Kind.SUCCEEDED) == [mine_id]
    assert (row(engine, unknown).status, row(engine, unknown).attempts) == ("queued", 0)
    assert row(engine, other_queue).status == "queued"


def test_max_jobs_and_priorities(engine: sa.Engine, reg: Registry) -> None:
    order: list[int] = []

    @job("t.order", target=reg)
    def record(payload: dict[str, Any], ctx: JobContext) -> None:
        order.append(payload["n"])

    for n, priority in ((1, 5), (2, 0), (3, 9), (4, 0)):
        add(engine, "t.order", {"n": n}, priority=priority)
    assert drain(engine, registry=reg, max_jobs=3).count == 3
    assert order == [2, 4, 1]
    assert drain(engine, registry=reg).count == 1
