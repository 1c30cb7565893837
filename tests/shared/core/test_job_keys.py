"""`unique_for` and `debounce`: keys that deduplicate for a while — both databases, and
20 concurrent enqueuers of one key on PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import NewJob, ValidationError, enqueue, enqueue_many
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.job_keys import job_keys
from jobdesk.shared.core.models import jobs
from jobdesk.worker.context import JobContext
from jobdesk.worker.registry import Registry, job
from jobdesk.worker.testing import drain


def add(engine: sa.Engine, payload: dict[str, Any], **options: Any) -> int:
    with engine.begin() as conn:
        return enqueue(conn, "keys.sync", payload, idempotency_key="user:42", **options)


def rows(engine: sa.Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                sa.select(
                    jobs.c.id, jobs.c.status, jobs.c.payload, jobs.c.next_run_at,
                    jobs.c.idempotency_key,
                ).order_by(jobs.c.id)
            )
        )  # fmt: skip


def close_window(engine: sa.Engine) -> None:
    """The window of every held key ends now (instead of waiting for it)."""
    with engine.begin() as conn:
        conn.execute(
            sa.update(job_keys)
            .where(job_keys.c.expires_at.is_not(None))
            .values(expires_at=db_now(conn) - timedelta(seconds=1))
        )


def test_unique_for_deduplicates_inside_the_window_only(engine: sa.Engine) -> None:
    first = add(engine, {"n": 1}, unique_for=60)
    assert add(engine, {"n": 2}, unique_for=60) == first
    close_window(engine)
    second = add(engine, {"n": 3}, unique_for=60)
    assert second != first
    assert add(engine, {"n": 4}, unique_for=60) == second
    found = rows(engine)
    assert [(r.id, r.payload) for r in found] == [(first, {"n": 1}), (second, {"n": 3})]
    # The key is the window's, not a job's idempotency key: each job is its own event.
    assert {r.idempotency_key for r in found} == {None}


def test_debounce_keeps_one_job_with_the_latest_payload(engine: sa.Engine) -> None:
    ids = [add(engine, {"n": n}, debounce=30) for n in range(5)]
    assert len(set(ids)) == 1
    (only,) = rows(engine)
    assert only.payload == {"n": 4}
    with engine.connect() as conn:
        wait = (only.next_run_at - db_now(conn)).total_seconds()
    assert 25 < wait <= 30  # 30 s after the latest call
    reg, seen = recorder()
    assert drain(engine, registry=reg).count == 0  # not during the quiet period
    with engine.connect() as conn:
        after_quiet = db_now(conn) + timedelta(seconds=31)
    assert drain(engine, registry=reg, now=after_quiet).succeeded == 1
    assert seen == [{"n": 4}]


def recorder() -> tuple[Registry, list[dict[str, Any]]]:
    reg, seen = Registry(), []

    @job("keys.sync", target=reg)
    def sync(payload: dict[str, Any], ctx: JobContext) -> None:
        seen.append(payload)

    return reg, seen


def test_a_debounced_job_that_started_is_followed_by_a_new_one(engine: sa.Engine) -> None:
    reg, _ = recorder()
    first = add(engine, {"n": 1}, debounce=0.001)
    with engine.connect() as conn:
        later = db_now(conn) + timedelta(seconds=1)
    drain(engine, registry=reg, now=later)
    second = add(engine, {"n": 2}, debounce=30)
    assert second != first
    assert [(r.status, r.payload) for r in rows(engine)] == [
        ("succeeded", {"n": 1}),
        ("queued", {"n": 2}),
    ]
    assert add(engine, {"n": 3}, debounce=30) == second


def test_enqueue_many_takes_windows_per_job(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        a, b, c = enqueue_many(
            conn,
            [
                NewJob("keys.sync", {"n": 1}, idempotency_key="k", unique_for=60),
                NewJob("keys.sync", {"n": 2}, idempotency_key="k", unique_for=60),
                NewJob("keys.sync", {"n": 3}),
            ],
        )
    assert a == b != c


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"unique_for": 5, "idempotency_key": None}, "unique_for: needs an idempotency_key"),
        ({"debounce": 0}, "debounce: must be a positive number of seconds"),
        ({"debounce": True}, "debounce: must be a positive number of seconds"),
        ({"unique_for": 60 * 86400}, "unique_for: at most 30 days"),
        ({"unique_for": 5, "debounce": 5}, "unique_for and debounce cannot be combined"),
        ({"debounce": 5, "secrets": {"t": "x"}}, "debounce: a debounced job's secrets"),
    ],
)
def test_bad_windows_are_refused(engine: sa.Engine, options: dict[str, Any], error: str) -> None:
    options = {"idempotency_key": "k", **options}
    with engine.begin() as conn, pytest.raises(ValidationError, match=error):
        enqueue(conn, "keys.sync", {}, **options)
    assert rows(engine) == []


def race(engine: sa.Engine, count: int, enqueue_one: Callable[[int], int]) -> list[int]:
    """`count` threads enqueue at the same moment, each on its own connection."""
    start = threading.Barrier(count)
    got: list[int] = []
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            start.wait(10)
            got.append(enqueue_one(n))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    return got


@pytest.mark.postgresql_only
def test_twenty_concurrent_enqueuers_of_one_key(db_url: str) -> None:
    from jobdesk.shared.core.db import make_engine

    engine = make_engine(db_url, pool_size=20)
    try:
        ids = race(engine, 20, lambda n: add(engine, {"n": n}, unique_for=60))
        assert len(set(ids)) == 1
        assert len(rows(engine)) == 1
        debounced = race(engine, 20, lambda n: _debounced(engine, n))
        assert len(set(debounced)) == 1
        (job_row,) = [r for r in rows(engine) if r.id == debounced[0]]
        assert job_row.payload["n"] in range(20)
        assert len(rows(engine)) == 2
    finally:
        engine.dispose()


def _debounced(engine: sa.Engine, n: int) -> int:
    with engine.begin() as conn:
        return enqueue(conn, "keys.sync", {"n": n}, idempotency_key="d", debounce=30)
