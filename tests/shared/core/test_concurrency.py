"""Real concurrency: many connections claiming at once, many processes enqueuing one key."""

from __future__ import annotations

import multiprocessing
import os
import random
import threading
import time
from collections import Counter
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import NewJob, enqueue, enqueue_many
from jobdesk.shared.core.claim import claim
from jobdesk.shared.core.db import make_engine
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.transitions import Completion, complete_many
from jobdesk.shared.settings import Settings

KEY = "welcome_email:user:42"


def _enqueue_same_key(url: str, barrier: Any, results: Any, hold: float) -> None:
    """Child process: enqueue KEY as soon as every sibling is ready, hold the
    transaction open a moment so the others collide with it, report the id."""
    engine = make_engine(url, settings=Settings(), pool_size=1)
    try:
        barrier.wait(timeout=60)
        with engine.begin() as conn:
            job_id = enqueue(
                conn,
                "email.send",
                {"template": "welcome", "to_user_id": 1, "pid": os.getpid()},
                idempotency_key=KEY,
            )
            time.sleep(hold)
        results.put(("ok", job_id))
    except Exception as exc:  # reported to the parent, which fails the test
        results.put(("error", repr(exc)))
    finally:
        engine.dispose()


@pytest.mark.slow
def test_same_key_from_several_processes_makes_exactly_one_job(
    engine: sa.Engine, db_url: str
) -> None:
    processes = 4
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes)
    results = ctx.Queue()
    children = [
        ctx.Process(target=_enqueue_same_key, args=(db_url, barrier, results, 0.3 * (i == 0)))
        for i in range(processes)
    ]
    for child in children:
        child.start()
    outcomes = [results.get(timeout=90) for _ in children]
    for child in children:
        child.join(timeout=30)
    assert [kind for kind, _ in outcomes] == ["ok"] * processes, outcomes
    ids = {job_id for _, job_id in outcomes}
    with engine.connect() as conn:
        stored = list(
            conn.execute(sa.select(jobs.c.id).where(jobs.c.idempotency_key == KEY)).scalars()
        )
    assert len(ids) == 1
    assert stored == list(ids)


def _claim_until_empty(
    engine: sa.Engine,
    worker: str,
    claimed: list[int],
    errors: list[BaseException],
    oversized: list[int],
) -> None:
    rng = random.Random(worker)
    try:
        idle = 0
        while idle < 3:
            limit = rng.randint(1, 40)
            with engine.begin() as conn:
                got = claim(conn, worker_id=worker, limit=limit, lease_seconds=300)
            if len(got) > limit:
                oversized.append(len(got))
            if not got:
                idle += 1
                continue
            idle = 0
            claimed.extend(job.id for job in got)
            with engine.begin() as conn:
                done = complete_many(
                    conn, [Completion(job.ref) for job in got], now=got[0].started_at
                )
            assert sorted(done) == sorted(job.id for job in got)
    except BaseException as exc:
        errors.append(exc)


def run_claimers(
    engine: sa.Engine, threads: int
) -> tuple[list[int], list[BaseException], list[int]]:
    claimed: list[int] = []
    errors: list[BaseException] = []
    oversized: list[int] = []
    workers = [
        threading.Thread(
            target=_claim_until_empty, args=(engine, f"w{i}", claimed, errors, oversized)
        )
        for i in range(threads)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    return claimed, errors, oversized


def seed(engine: sa.Engine, plain: int, grouped: int, groups: int) -> set[int]:
    specs = [NewJob("test.noop", {"n": n}, priority=n % 3) for n in range(plain)]
    specs += [NewJob("test.noop", {"g": n}, group_key=f"g{n % groups}") for n in range(grouped)]
    with engine.begin() as conn:
        return set(enqueue_many(conn, specs))


@pytest.mark.postgresql_only
@pytest.mark.slow
def test_eight_connections_claiming_at_once_never_double_claim(db_url: str) -> None:
    engine = make_engine(db_url, settings=Settings(), pool_size=8)
    try:
        expected = seed(engine, plain=1800, grouped=200, groups=10)
        claimed, errors, oversized = run_claimers(engine, threads=8)
    finally:
        engine.dispose()
    assert errors == []
    assert oversized == []
    duplicates = [job_id for job_id, n in Counter(claimed).items() if n > 1]
    assert duplicates == []
    assert set(claimed) == expected


@pytest.mark.sqlite_only
@pytest.mark.slow
def test_sqlite_threads_claiming_at_once_never_double_claim_nor_lock_out(db_url: str) -> None:
    engine = make_engine(db_url, settings=Settings())
    try:
        expected = seed(engine, plain=400, grouped=60, groups=6)
        claimed, errors, oversized = run_claimers(engine, threads=4)
    finally:
        engine.dispose()
    assert errors == []  # in particular no "database is locked"
    assert oversized == []
    assert sorted(claimed) == sorted(expected)


def _enqueue_keys(
    engine: sa.Engine,
    keys: list[str],
    barrier: threading.Barrier,
    results: list[list[int]],
    errors: list[BaseException],
) -> None:
    try:
        with engine.begin() as conn:
            barrier.wait(5)
            specs = [NewJob("test.noop", {"k": key}, idempotency_key=key) for key in keys]
            results.append(enqueue_many(conn, specs))
    except BaseException as exc:  # reported by the test
        errors.append(exc)


@pytest.mark.postgresql_only
@pytest.mark.slow
def test_enqueue_many_of_shared_keys_in_opposite_orders_never_deadlocks(db_url: str) -> None:
    """B17: two transactions enqueueing the same keys in opposite orders, 30 rounds."""
    engine = make_engine(db_url, settings=Settings(), pool_size=4)
    try:
        for round_ in range(30):
            keys = [f"order:{round_}:{n}" for n in range(4)]
            barrier = threading.Barrier(2)
            results: list[list[int]] = []
            errors: list[BaseException] = []
            pair = [
                threading.Thread(
                    target=_enqueue_keys, args=(engine, order, barrier, results, errors)
                )
                for order in (keys, list(reversed(keys)))
            ]
            for thread in pair:
                thread.start()
            for thread in pair:
                thread.join(30)
            assert errors == [], f"round {round_}: {errors!r}"
            assert len(results) == 2
            assert sorted(results[0]) == sorted(results[1])  # both got the same four jobs
    finally:
        engine.dispose()
