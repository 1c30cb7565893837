"""`ctx.once(key, fn)`: an effect in this database (`fn(conn)`) commits with its ledger
row, exactly once per key, even when the transaction or its COMMIT is lost; Jobdesk's own
database work in a handler's context is retried, and when the database stays away the
attempt ends snoozed — never counted as the handler's failure."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import DatabaseUnavailable, Snooze, enqueue
from jobdesk.shared.core.claim import ClaimedJob, claim
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.effects import find_effect
from jobdesk.shared.core.models import job_attempts, jobs
from jobdesk.shared.settings import Settings
from jobdesk.worker.completer import apply_outcomes
from jobdesk.worker.context import JobContext
from jobdesk.worker.executor import Kind, Outcome, execute, make_attempt
from jobdesk.worker.registry import Registry, job
from tests.worker.dbfaults import handler_engine, refusing_connections

scratch = sa.MetaData()
#: An effect table WITHOUT a unique key: an effect applied twice is two rows.
applied = sa.Table(
    "test_once_applied",
    scratch,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("key", sa.String(100), nullable=False),
)

#: A short lease: Jobdesk's own database work is retried for at most a lease.
FAST = Settings(lease_seconds=1.0)


@pytest.fixture
def table(engine: sa.Engine) -> sa.Table:
    scratch.create_all(engine)
    with engine.begin() as conn:
        conn.execute(sa.delete(applied))
    return applied


def _count(engine: sa.Engine, key: str) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count()).select_from(applied).where(applied.c.key == key)
            ).scalar_one()
        )


def _running(engine: sa.Engine, job_type: str = "t.once") -> ClaimedJob:
    with engine.begin() as conn:
        enqueue(conn, job_type, {})
        (claimed,) = claim(conn, worker_id="w", limit=1, now=db_now(conn), lease_seconds=30)
    return claimed


def _ctx(engine: sa.Engine, claimed: ClaimedJob, settings: Settings = FAST) -> JobContext:
    return JobContext(
        job_id=claimed.id,
        job_type=claimed.job_type,
        attempt=claimed.attempt,
        max_attempts=claimed.max_attempts,
        idempotency_key=None,
        engine=engine,
        worker_id=claimed.worker_id,
        lease_token=claimed.lease_token,
        settings=settings,
    )


def _insert(key: str, calls: list[int]) -> Any:
    def effect(conn: sa.Connection) -> dict[str, Any]:
        calls.append(1)
        conn.execute(sa.insert(applied).values(key=key))
        return {"rows": 1}

    return effect


# ------------------------------------------------------------------ the contract


def test_an_effect_taking_the_connection_commits_with_its_ledger_row(
    engine: sa.Engine, table: sa.Table
) -> None:
    ctx = _ctx(engine, _running(engine))
    calls: list[int] = []
    assert ctx.once("db:1", _insert("db:1", calls)) == {"rows": 1}
    assert ctx.once("db:1", _insert("db:1", calls)) == {"rows": 1}  # done: skipped
    other = _ctx(engine, _running(engine))
    assert other.once("db:1", _insert("db:1", calls)) == {"rows": 1}
    assert calls == [1]
    assert _count(engine, "db:1") == 1
    with engine.connect() as conn:
        assert find_effect(conn, "db:1") == {"rows": 1}


def test_an_effect_that_raises_leaves_neither_its_writes_nor_the_key(
    engine: sa.Engine, table: sa.Table
) -> None:
    ctx = _ctx(engine, _running(engine))

    def half_done(conn: sa.Connection) -> None:
        conn.execute(sa.insert(applied).values(key="db:2"))
        raise RuntimeError("after the first write")

    with pytest.raises(RuntimeError, match="after the first write"):
        ctx.once("db:2", half_done)
    assert _count(engine, "db:2") == 0
    with engine.connect() as conn:
        assert find_effect(conn, "db:2") is None
    calls: list[int] = []
    assert ctx.once("db:2", _insert("db:2", calls)) == {"rows": 1}
    assert _count(engine, "db:2") == 1


@pytest.mark.postgresql_only
def test_the_effect_and_the_ledger_row_are_one_transaction(
    engine: sa.Engine, table: sa.Table
) -> None:
    ctx = _ctx(engine, _running(engine))
    seen: list[int] = []

    def effect(conn: sa.Connection) -> None:
        seen.append(conn.execute(sa.text("SELECT txid_current()")).scalar_one())
        conn.execute(sa.insert(applied).values(key="db:3"))

    ctx.once("db:3", effect)
    with engine.connect() as conn:
        ledger_xmin = conn.execute(
            sa.text("SELECT xmin::text FROM jobdesk_effects WHERE key = 'db:3'")
        ).scalar_one()
        effect_xmin = conn.execute(
            sa.text("SELECT xmin::text FROM test_once_applied WHERE key = 'db:3'")
        ).scalar_one()
    assert ledger_xmin == effect_xmin == str(seen[0])


def test_the_signature_decides_what_the_effect_is_given(engine: sa.Engine, table: sa.Table) -> None:
    ctx = _ctx(engine, _running(engine))
    given: list[Any] = []

    def outside() -> dict[str, Any]:
        given.append("nothing")
        return {"sent": True}

    def inside(conn: sa.Connection, note: str = "default") -> None:
        given.append(type(conn).__name__)

    def with_key(prefix: str, conn: sa.Connection) -> None:
        given.append(prefix)

    def two(a: Any, b: Any) -> None:
        raise AssertionError("never called")

    assert ctx.once("sig:1", outside) == {"sent": True}
    assert ctx.once("sig:2", inside) == {}
    assert ctx.once("sig:3", functools.partial(with_key, "partial")) == {}
    assert ctx.once("sig:4", lambda: None) == {}
    with pytest.raises(TypeError, match=r"no argument .* or one, the connection"):
        ctx.once("sig:5", two)
    assert given == ["nothing", "Connection", "partial"]
    with engine.connect() as conn:
        assert find_effect(conn, "sig:5") is None  # refused before any work


# ------------------------------------------------------------------ lost transactions


@contextmanager
def _commit_answer_lost(engine: sa.Engine, times: int = 1) -> Iterator[list[int]]:
    """The next `times` COMMITs reach the database and succeed there, but the client
    hears a lost connection instead of the answer (what a network cut or a backend
    killed right after COMMIT looks like from the worker)."""
    lost: list[int] = []

    def commit(conn: sa.Connection) -> None:
        if len(lost) >= times:
            return
        lost.append(1)
        conn.connection.driver_connection.commit()  # type: ignore[union-attr]
        raise sa.exc.OperationalError(
            "COMMIT", None, ConnectionError("server closed the connection unexpectedly")
        )

    sa.event.listen(engine, "commit", commit)
    try:
        yield lost
    finally:
        sa.event.remove(engine, "commit", commit)


def test_a_commit_whose_answer_was_lost_is_not_run_again(
    engine: sa.Engine, table: sa.Table
) -> None:
    ctx = _ctx(engine, _running(engine))
    calls: list[int] = []
    with _commit_answer_lost(engine) as lost:
        detail = ctx.once("db:lost-commit", _insert("db:lost-commit", calls))
    assert lost == [1]
    assert detail == {"rows": 1}
    assert calls == [1]
    assert _count(engine, "db:lost-commit") == 1


@pytest.mark.postgresql_only
def test_a_connection_killed_under_the_effect_is_retried_and_applied_once(
    engine: sa.Engine, table: sa.Table
) -> None:
    ctx = _ctx(engine, _running(engine))
    calls: list[int] = []

    def effect(conn: sa.Connection) -> None:
        calls.append(1)
        conn.execute(sa.insert(applied).values(key="db:killed"))
        if len(calls) == 1:  # the server ends this session mid-transaction
            conn.execute(sa.text("SELECT pg_terminate_backend(pg_backend_pid())"))

    ctx.once("db:killed", effect)
    assert calls == [1, 1]
    assert _count(engine, "db:killed") == 1


@pytest.mark.postgresql_only
def test_a_failing_statement_of_the_effect_is_the_handlers_failure(
    engine: sa.Engine, table: sa.Table
) -> None:
    """Not retried and not snoozed: a statement of the handler's own that times out (an
    OperationalError that is no lost connection) is the handler's failure."""
    ctx = _ctx(engine, _running(engine))
    calls: list[int] = []

    def slow(conn: sa.Connection) -> None:
        calls.append(1)
        conn.execute(sa.text("SET LOCAL statement_timeout = 10"))
        conn.execute(sa.text("SELECT pg_sleep(1)"))

    with pytest.raises(sa.exc.OperationalError, match="statement timeout"):
        ctx.once("db:slow", slow)
    assert calls == [1]
    with engine.connect() as conn:
        assert find_effect(conn, "db:slow") is None


# ------------------------------------------------------------------ the database away


def _handler_engine(url: str) -> sa.Engine:
    return handler_engine(url, FAST)


def _one_type(handler: Any, name: str = "t.once") -> Registry:
    reg = Registry()
    job(name, target=reg, max_attempts=1)(handler)
    return reg


def _settle(engine: sa.Engine, outcome: Outcome, reg: Registry) -> None:
    with engine.begin() as conn:
        apply_outcomes(conn, [outcome], now=db_now(conn), policy_for=reg.policy_for)


@pytest.mark.postgresql_only
def test_a_short_outage_is_ridden_out_by_the_retries(
    engine: sa.Engine, db_url: str, table: sa.Table
) -> None:
    handlers = _handler_engine(db_url)
    calls: list[int] = []
    ctx = _ctx(handlers, _running(engine), Settings(lease_seconds=10.0))
    with refusing_connections(db_url):
        started = time.monotonic()
        worker = threading.Thread(
            target=lambda: calls.append(len(ctx.once("db:outage", _insert("db:outage", [])))),
        )
        worker.start()
        time.sleep(0.6)  # refused for a while: the ledger's first calls fail
    worker.join(15)
    handlers.dispose()
    assert calls == [1]
    assert time.monotonic() - started >= 0.5
    assert _count(engine, "db:outage") == 1


@pytest.mark.postgresql_only
def test_an_outage_past_the_retries_snoozes_the_attempt_without_counting_it(
    engine: sa.Engine, db_url: str, table: sa.Table
) -> None:
    calls: list[int] = []

    def handler(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
        return ctx.once("db:down", _insert("db:down", calls))

    reg = _one_type(handler)
    claimed = _running(engine)
    job_type = reg.get("t.once")
    assert job_type is not None
    handlers = _handler_engine(db_url)
    attempt = make_attempt(claimed, job_type, handlers, FAST)
    attempt.begin()
    with refusing_connections(db_url):
        started = time.monotonic()
        outcome = execute(claimed, job_type, attempt.ctx, clock=lambda: claimed.started_at)
        took = time.monotonic() - started
    handlers.dispose()
    assert outcome.kind is Kind.SNOOZED
    assert outcome.error is not None
    assert outcome.error.startswith("database unavailable during ctx.once('db:down')")
    assert 0.1 <= took < 5  # retried (one try takes milliseconds) for up to a lease (1 s)
    assert calls == []
    _settle(engine, outcome, reg)
    with engine.connect() as conn:
        row = conn.execute(sa.select(jobs).where(jobs.c.id == claimed.id)).one()
        attempt_rows = conn.execute(
            sa.select(sa.func.count()).where(job_attempts.c.job_id == claimed.id)
        ).scalar_one()
    assert (row.status, row.attempts, attempt_rows) == ("queued", 0, 0)
    assert row.next_run_at >= claimed.started_at + timedelta(seconds=0.5)


@pytest.mark.slow
@pytest.mark.postgresql_only
def test_progress_and_reserve_snooze_too(engine: sa.Engine, db_url: str) -> None:
    handlers = _handler_engine(db_url)
    ctx = _ctx(handlers, _running(engine))
    with refusing_connections(db_url):
        with pytest.raises(DatabaseUnavailable, match=r"during ctx\.progress") as raised:
            ctx.progress(1, 2)
        assert isinstance(raised.value, Snooze)
        with pytest.raises(DatabaseUnavailable, match=r"during ctx.reserve\('k'\)"):
            ctx.reserve("k")
        ctx.release("k")  # on the way out of a failure: logged, not raised
    handlers.dispose()


@pytest.mark.postgresql_only
def test_an_outside_effect_whose_record_failed_is_recorded_with_the_outcome(
    engine: sa.Engine, db_url: str
) -> None:
    """The email went out and then the database went away: the record is not lost and
    not given up on (that would send it again) — it goes in with the attempt's outcome,
    which the completer retries until it commits."""
    sent: list[int] = []
    outage: list[Any] = []

    def send() -> dict[str, Any]:
        sent.append(1)
        refusing = refusing_connections(db_url)
        refusing.__enter__()
        outage.append(refusing)
        return {"message_id": "<m1>"}

    def handler(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
        return ctx.once("mail:1", send)

    reg = _one_type(handler)
    claimed = _running(engine)
    job_type = reg.get("t.once")
    assert job_type is not None
    handlers = _handler_engine(db_url)
    attempt = make_attempt(claimed, job_type, handlers, FAST)
    attempt.begin()
    try:
        outcome = execute(claimed, job_type, attempt.ctx, clock=lambda: claimed.started_at)
    finally:
        for refusing in outage:
            refusing.__exit__(None, None, None)
        handlers.dispose()
    assert sent == [1]
    assert outcome.kind is Kind.SUCCEEDED
    assert len(outcome.writes) == 1
    with engine.connect() as conn:
        assert find_effect(conn, "mail:1") is None  # reserved, not yet done
    _settle(engine, outcome, reg)
    with engine.connect() as conn:
        assert find_effect(conn, "mail:1") == {"message_id": "<m1>"}
