"""B12: an outcome the database cannot store never turns into "worker lost" and a rerun
of a handler that already did its work; absurd delays are capped."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import RetryAfter, Snooze, enqueue
from jobdesk.shared.core.claim import claim
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.db import SerializedJSON
from jobdesk.shared.core.models import job_attempts, jobs
from jobdesk.shared.core.retry import RetryPolicy
from jobdesk.shared.settings import Settings
from jobdesk.worker.completer import Completer
from jobdesk.worker.context import JobContext
from jobdesk.worker.executor import Kind, Outcome, make_attempt
from jobdesk.worker.registry import Registry, job
from jobdesk.worker.testing import drain


def add(engine: sa.Engine, job_type: str) -> int:
    with engine.begin() as conn:
        return enqueue(conn, job_type, {}, max_attempts=3)


def row(engine: sa.Engine, job_id: int) -> sa.Row[Any]:
    """The columns these tests look at (not the payload: some are poison on purpose)."""
    columns = (jobs.c.status, jobs.c.attempts, jobs.c.last_error, jobs.c.next_run_at)
    with engine.connect() as conn:
        return conn.execute(sa.select(*columns).where(jobs.c.id == job_id)).one()


@pytest.mark.parametrize(
    ("result", "problem"),
    [
        ({"s": "a\x00b"}, "contains a NUL character"),
        ({"s": "\ud800"}, "lone surrogate"),
        ({"x": float("nan")}, "not allowed in JSON"),
        ({"n": 2**70}, "beyond 64 bits"),
    ],
    ids=["nul", "surrogate", "nan", "bigint"],
)
def test_an_unstorable_result_ends_the_job_once_naming_why(
    engine: sa.Engine, result: dict[str, Any], problem: str
) -> None:
    reg = Registry()
    runs: list[int] = []

    @job("t.bad_result", target=reg)
    def bad(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
        runs.append(ctx.attempt)
        return result

    job_id = add(engine, "t.bad_result")
    drain(engine, registry=reg)
    drain(engine, registry=reg, now=None)
    r = row(engine, job_id)
    assert runs == [1]
    assert r.status == "dead"
    assert "ResultNotStorable" in r.last_error
    assert problem in r.last_error
    assert "worker lost" not in r.last_error


@pytest.mark.parametrize("seconds", [float("inf"), 1e12])
def test_a_snooze_too_long_to_store_is_capped(engine: sa.Engine, seconds: float) -> None:
    reg = Registry()

    @job("t.sleepy", target=reg)
    def sleepy(payload: dict[str, Any], ctx: JobContext) -> None:
        raise Snooze(seconds, "come back much later")

    job_id = add(engine, "t.sleepy")
    with engine.connect() as conn:
        before = db_now(conn)
    drain(engine, registry=reg)
    r = row(engine, job_id)
    cap = RetryPolicy().retry_after_cap
    assert (r.status, r.attempts) == ("queued", 0)
    assert (
        before + cap - timedelta(seconds=5) <= r.next_run_at <= before + cap + timedelta(seconds=30)
    )


def test_a_negative_retry_after_is_a_failed_attempt_saying_so(engine: sa.Engine) -> None:
    reg = Registry()

    @job("t.negative", target=reg)
    def negative(payload: dict[str, Any], ctx: JobContext) -> None:
        raise RetryAfter(-1)

    job_id = add(engine, "t.negative")
    drain(engine, registry=reg)
    r = row(engine, job_id)
    assert r.status == "failed"
    assert r.last_error.startswith("ValueError: RetryAfter seconds must be >= 0")


@pytest.mark.postgresql_only
def test_an_outcome_the_database_refuses_becomes_a_failed_attempt(engine: sa.Engine) -> None:
    """The completer's last line of defence: even a result that slipped past the checks
    (here forced in, NUL in a jsonb) is written as a dead attempt naming the error."""
    reg = Registry()

    @job("t.forced", target=reg)
    def forced(payload: dict[str, Any], ctx: JobContext) -> None:
        return None

    job_id = add(engine, "t.forced")
    with engine.begin() as conn:
        [claimed] = claim(conn, worker_id="w", limit=1, lease_seconds=30)
    registered = reg.get("t.forced")
    assert registered is not None
    attempt = make_attempt(claimed, registered, engine, Settings())
    attempt.settle(Outcome(claimed, Kind.SUCCEEDED, result=SerializedJSON('{"s": "a\\u0000b"}')))
    written: list[Any] = []
    completer = Completer(
        engine,
        clock=lambda: db_now_of(engine),
        policy_for=reg.policy_for,
        worker_id="w",
        on_written=written.extend,
    )
    completer.start()
    completer.submit(attempt)
    assert completer.wait_idle(20)
    completer.stop()
    completer.join(10)
    r = row(engine, job_id)
    assert r.status == "dead"
    assert "OutcomeNotStorable" in r.last_error
    with engine.connect() as conn:
        outcomes = list(
            conn.execute(
                sa.select(job_attempts.c.outcome).where(job_attempts.c.job_id == job_id)
            ).scalars()
        )
    assert outcomes == ["permanent"]


def db_now_of(engine: sa.Engine) -> Any:
    with engine.connect() as conn:
        return db_now(conn)


def _plain_sql_job(engine: sa.Engine, payload_text: str, job_type: str = "t.any") -> int:
    cast = "CAST(:payload AS jsonb)" if engine.dialect.name == "postgresql" else ":payload"
    with engine.begin() as conn:
        return int(
            conn.execute(
                sa.text(
                    f"INSERT INTO jobdesk_jobs (job_type, payload) VALUES (:type, {cast}) "
                    "RETURNING id"
                ),
                {"payload": payload_text, "type": job_type},
            ).scalar_one()
        )


@pytest.mark.parametrize("levels", [980, 1500])
def test_one_undecodable_row_goes_dead_alone_and_its_batch_runs(
    engine: sa.Engine, levels: int
) -> None:
    reg = Registry()
    ran: list[int] = []

    @job("t.any", target=reg)
    def anything(payload: dict[str, Any], ctx: JobContext) -> None:
        ran.append(ctx.job_id)

    before = [add(engine, "t.any") for _ in range(2)]
    poison = _plain_sql_job(engine, '{"a":' * levels + "1" + "}" * levels)
    after = [add(engine, "t.any") for _ in range(2)]
    result = drain(engine, registry=reg)
    assert sorted(ran) == sorted(before + after)
    r = row(engine, poison)
    assert r.status == "dead"
    assert r.last_error.startswith("PayloadNotDecodable: the stored payload")
    assert result.count == 4


@pytest.mark.sqlite_only
def test_a_row_that_is_not_json_goes_dead_alone(engine: sa.Engine) -> None:
    reg = Registry()

    @job("t.any", target=reg)
    def anything(payload: dict[str, Any], ctx: JobContext) -> None:
        return None

    good = add(engine, "t.any")
    poison = _plain_sql_job(engine, "{not json")
    drain(engine, registry=reg)
    assert row(engine, good).status == "succeeded"
    bad = row(engine, poison)
    assert bad.status == "dead"
    assert "is not valid JSON" in bad.last_error


@pytest.mark.parametrize(
    ("payload_text", "kind"),
    [
        ("[1, 2]", "a JSON array"),
        ('"user 42"', "a JSON string"),
        ("null", "JSON null"),
        ("42", "a JSON number"),
        ("true", "a JSON boolean"),
    ],
    ids=["array", "string", "null", "number", "boolean"],
)
def test_a_payload_that_is_not_an_object_goes_dead_at_once_alone_and_its_batch_runs(
    engine: sa.Engine, payload_text: str, kind: str
) -> None:
    """Before, PostgreSQL handed such a payload to the handler, which failed on it five
    times; SQLite failed every claim that met a number."""
    reg = Registry()
    ran: list[int] = []

    @job("t.any", target=reg)
    def anything(payload: dict[str, Any], ctx: JobContext) -> None:
        assert isinstance(payload, dict)
        ran.append(ctx.job_id)

    before = [add(engine, "t.any") for _ in range(2)]
    poison = _plain_sql_job(engine, payload_text)
    after = [add(engine, "t.any") for _ in range(2)]
    result = drain(engine, registry=reg)
    assert sorted(ran) == sorted(before + after)
    assert result.count == 4
    r = row(engine, poison)
    assert (r.status, r.attempts) == ("dead", 1)
    assert r.last_error.startswith(
        f"PayloadNotDecodable: the stored payload is {kind}, not a JSON object"
    )
    with engine.connect() as conn:
        outcomes = list(
            conn.execute(
                sa.select(job_attempts.c.outcome).where(job_attempts.c.job_id == poison)
            ).scalars()
        )
    assert outcomes == ["permanent"]
