"""Completions and heartbeats on real PostgreSQL, two connections at once: the lock cycle
that two overlapping multi-row writes in opposite order make, and why the heartbeat's
renewal (SKIP LOCKED) and the completion can never form it.

Each transaction below writes its rows one statement at a time, so the interleaving —
A holds the first row, B holds the second and waits for the first, A asks for the
second — is the same on every run instead of a race between two plans.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from jobdesk.shared.core.claim import ClaimedJob, JobRef, claim
from jobdesk.shared.core.leases import LeaseRenewal, renew_leases
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.transitions import Completion, complete_many
from jobdesk.shared.settings import Settings
from jobdesk.worker.executor import Attempt, make_attempt
from jobdesk.worker.heartbeat import Heartbeat
from jobdesk.worker.registry import Registry, job
from tests.factories import job_row, make_job

pytestmark = pytest.mark.postgresql_only

NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)
LEASE = 30.0
#: Longest a test waits for the other thread to queue for a row lock.
WAIT_FOR_LOCK_SECONDS = 10.0


def two_running(engine: sa.Engine) -> tuple[ClaimedJob, ClaimedJob]:
    with engine.begin() as conn:
        make_job(conn, next_run_at=NOW - timedelta(seconds=1))
        make_job(conn, next_run_at=NOW - timedelta(seconds=1))
        first, second = claim(conn, worker_id="w1", limit=2, now=NOW, lease_seconds=LEASE)
    return first, second


def lock_waiters(engine: sa.Engine) -> int:
    """Backends of this database queued for a lock right now."""
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock'"
                )
            ).scalar_one()
        )


def wait_until_blocked(engine: sa.Engine, thread: threading.Thread) -> None:
    deadline = time.monotonic() + WAIT_FOR_LOCK_SECONDS
    while lock_waiters(engine) == 0:
        assert thread.is_alive(), "the other transaction finished instead of waiting"
        assert time.monotonic() < deadline, "the other transaction never queued for the row"
        time.sleep(0.01)


class Other(threading.Thread):
    """Transaction B, on its own connection: `steps` run in order in one transaction."""

    def __init__(self, engine: sa.Engine, steps: list[Callable[[sa.Connection], Any]]) -> None:
        super().__init__(daemon=True)
        self.engine = engine
        self.steps = steps
        self.results: list[Any] = []
        self.error: BaseException | None = None
        self.holding = threading.Event()

    def run(self) -> None:
        try:
            with self.engine.begin() as conn:
                for index, step in enumerate(self.steps):
                    self.results.append(step(conn))
                    if index == 0:
                        self.holding.set()
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            self.holding.set()


def is_deadlock(exc: BaseException | None) -> bool:
    return isinstance(getattr(exc, "orig", None), psycopg.errors.DeadlockDetected)


@pytest.fixture
def conn_a(engine: sa.Engine) -> Iterator[sa.Connection]:
    with engine.connect() as conn:
        yield conn


def touch(job_id: int) -> Callable[[sa.Connection], Any]:
    """A plain UPDATE of one running row: what a renewal that waits for locks does."""

    def step(conn: sa.Connection) -> Any:
        return conn.execute(
            sa.update(jobs).where(jobs.c.id == job_id).values(updated_at=NOW)
        ).rowcount

    return step


def complete(item: ClaimedJob) -> Callable[[sa.Connection], Any]:
    def step(conn: sa.Connection) -> Any:
        return complete_many(conn, [Completion(item.ref)], now=NOW)

    return step


def renew(conn: sa.Connection, *items: ClaimedJob) -> LeaseRenewal:
    return renew_leases(conn, [i.ref for i in items], lease_seconds=LEASE, now=NOW)


def test_waiting_writes_in_opposite_order_deadlock(
    engine: sa.Engine, conn_a: sa.Connection
) -> None:
    """The hazard itself: A writes x then y, B writes y then x; PostgreSQL breaks the
    cycle by failing one of them. (This is what a heartbeat that waits for row locks
    and a completion ordered differently did.)"""
    x, y = two_running(engine)
    a = conn_a.begin()
    touch(x.id)(conn_a)
    other = Other(engine, [touch(y.id), touch(x.id)])
    other.start()
    assert other.holding.wait(WAIT_FOR_LOCK_SECONDS)
    wait_until_blocked(engine, other)
    error: BaseException | None = None
    try:
        touch(y.id)(conn_a)
    except sa.exc.OperationalError as exc:
        error = exc
    if error is None:
        a.commit()
    else:
        a.rollback()
    other.join(WAIT_FOR_LOCK_SECONDS)
    assert not other.is_alive()
    assert [is_deadlock(error), is_deadlock(other.error)].count(True) == 1


def test_renewal_passes_over_rows_a_completion_holds(
    engine: sa.Engine, conn_a: sa.Connection
) -> None:
    """Heartbeat first: it renews x; the completer takes y and queues for x; the
    heartbeat's renewal of y skips it instead of waiting — no cycle, both commit."""
    x, y = two_running(engine)
    a = conn_a.begin()
    assert renew(conn_a, x) == LeaseRenewal([x.id], [])
    completer = Other(engine, [complete(y), complete(x)])
    completer.start()
    assert completer.holding.wait(WAIT_FOR_LOCK_SECONDS)
    wait_until_blocked(engine, completer)
    started = time.monotonic()
    assert renew(conn_a, y) == LeaseRenewal([], [y.id])  # busy: still held, not renewed
    assert time.monotonic() - started < 1.0  # it did not wait (deadlock_timeout is 1 s)
    a.commit()
    completer.join(WAIT_FOR_LOCK_SECONDS)
    assert completer.error is None, completer.error
    assert completer.results == [[y.id], [x.id]]
    with engine.connect() as conn:
        assert {job_row(conn, j.id).status for j in (x, y)} == {"succeeded"}


def test_renewal_never_waits_for_a_completion_in_progress(
    engine: sa.Engine, conn_a: sa.Connection
) -> None:
    """Completion first, holding both rows: the renewal returns at once with both busy
    (not lost); once the completion committed they are neither renewed nor held."""
    x, y = two_running(engine)
    done = threading.Event()
    release = threading.Event()

    def hold(conn: sa.Connection) -> Any:
        done.set()
        assert release.wait(WAIT_FOR_LOCK_SECONDS)

    completer = Other(
        engine,
        [lambda conn: complete_many(conn, [Completion(x.ref), Completion(y.ref)], now=NOW), hold],
    )
    completer.start()
    assert done.wait(WAIT_FOR_LOCK_SECONDS)
    with conn_a.begin():
        started = time.monotonic()
        renewal = renew(conn_a, y, x)
        assert time.monotonic() - started < 1.0
    assert sorted(renewal.busy) == sorted([x.id, y.id])
    assert renewal.renewed == []
    release.set()
    completer.join(WAIT_FOR_LOCK_SECONDS)
    assert completer.error is None, completer.error
    with conn_a.begin():
        assert renew(conn_a, x, y) == LeaseRenewal([], [])


def test_renewal_tells_busy_from_lost_and_checks_the_newest_row(
    engine: sa.Engine, conn_a: sa.Connection
) -> None:
    x, y = two_running(engine)
    stale = JobRef(y.id, y.lease_token + 1, y.attempt, y.worker_id, y.started_at)
    with conn_a.begin():
        renewal = renew_leases(conn_a, [x.ref, stale], lease_seconds=LEASE, now=NOW)
    assert renewal == LeaseRenewal([x.id], [])
    with engine.connect() as conn:
        assert job_row(conn, x.id).lease_expires_at == NOW + timedelta(seconds=LEASE)


def noop(payload: dict[str, Any], ctx: Any) -> None:
    """Never run here."""


def attempt_for(item: ClaimedJob, engine: sa.Engine) -> Attempt:
    registry = Registry()
    job("test.noop", timeout=30, target=registry)(noop)
    job_type = registry.get("test.noop")
    assert job_type is not None
    return make_attempt(item, job_type, engine, Settings())


def test_heartbeat_keeps_a_job_whose_row_is_busy(engine: sa.Engine, conn_a: sa.Connection) -> None:
    """A handler's own transaction holds its job row (e.g. `ctx.progress`) across a
    heartbeat: the attempt is not fenced, and the next heartbeat renews its lease."""
    x, _ = two_running(engine)
    attempt = attempt_for(x, engine)
    fenced: list[Attempt] = []
    beat_at = NOW + timedelta(seconds=10)
    heartbeat = Heartbeat(
        engine,
        interval=10,
        lease_seconds=LEASE,
        clock=lambda: beat_at,
        held=lambda: [attempt],
        on_fenced=fenced.append,
        worker_id="w1",
        register=lambda conn, now: None,
        skew=lambda: None,
    )
    with conn_a.begin():
        conn_a.execute(sa.update(jobs).where(jobs.c.id == x.id).values(progress={"done": 1}))
        heartbeat.beat()
    assert fenced == []
    assert not attempt.settled
    assert heartbeat.skipped == 1
    with engine.connect() as conn:
        assert job_row(conn, x.id).lease_expires_at == NOW + timedelta(seconds=LEASE)
    heartbeat.beat()
    assert fenced == []
    assert not attempt.settled
    assert heartbeat.skipped == 1
    with engine.connect() as conn:
        assert job_row(conn, x.id).lease_expires_at == beat_at + timedelta(seconds=LEASE)
