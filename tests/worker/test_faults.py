"""Database and process faults with real workers: D1, D4, D9, F7."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import NewJob, enqueue, enqueue_many
from jobdesk.shared.core.db import make_engine
from jobdesk.shared.core.models import workers as workers_table
from jobdesk.shared.migrate import upgrade
from jobdesk.shared.settings import Settings
from jobdesk.worker.config import WorkerConfig
from jobdesk.worker.registry import Registry
from jobdesk.worker.runner import Runner
from tests.worker.procs import (
    Workers,
    all_done,
    attempts_of,
    effect_rows,
    job,
    statuses,
    wait_for,
    workers,
)

pytestmark = pytest.mark.slow


def effects_are_unique(engine: sa.Engine, prefix: str = "done:") -> Counter[int]:
    return Counter(row.job_id for row in effect_rows(engine, prefix))


@pytest.mark.postgresql_only
def test_worker_survives_terminated_connections(engine: sa.Engine, procs: Workers) -> None:
    worker = procs.start("--concurrency", "4")
    ids: list[int] = []

    def terminate() -> int:
        with engine.connect() as conn:
            killed = conn.execute(
                sa.text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND application_name LIKE 'jobdesk-%'"
                )
            ).scalar_one()
            conn.commit()
        return int(killed)

    killed = 0
    for round_ in range(4):
        with engine.begin() as conn:
            ids += enqueue_many(
                conn, [NewJob("t.effect", {"key": f"d1:{round_}:{i}"}) for i in range(25)]
            )
        time.sleep(0.2)
        killed += terminate()
    assert killed >= 4
    wait_for(lambda: all_done(engine, len(ids)), 30, interval=0.2)
    assert worker.alive()
    assert set(effects_are_unique(engine).values()) == {1}
    assert statuses(engine) == {"succeeded": 100}
    assert "db_unavailable" in worker.log()
    assert worker.stop() == 0


@pytest.mark.postgresql_only
def test_handlers_exhausting_their_pool_do_not_starve_leases(
    engine: sa.Engine, procs: Workers
) -> None:
    with engine.begin() as conn:
        ids = enqueue_many(conn, [NewJob("t.db_hold", {"seconds": 0.8}) for _ in range(8)])
    worker = procs.start("--concurrency", "6", env={"JOBDESK_DB_POOL_SIZE": "1"})
    wait_for(lambda: all_done(engine, 8), 30, interval=0.2)
    for job_id in ids:
        assert [a.outcome for a in attempts_of(engine, job_id)] == ["succeeded"]
    assert "share 1 database connections" in worker.log()
    assert worker.stop() == 0


@pytest.mark.sqlite_only
def test_three_sqlite_workers_never_double_claim(engine: sa.Engine, procs: Workers) -> None:
    with engine.begin() as conn:
        ids = enqueue_many(conn, [NewJob("t.effect", {"key": f"d9:{i}"}) for i in range(150)])
    started = [procs.start("--concurrency", "3") for _ in range(3)]
    writer_stop = threading.Event()

    def dashboard_writes() -> None:  # another writer on the same file, like the dashboard
        while not writer_stop.is_set():
            with engine.begin() as conn:
                enqueue(conn, "t.unknown", {})
            time.sleep(0.01)

    writer = threading.Thread(target=dashboard_writes)
    writer.start()
    try:
        wait_for(lambda: statuses(engine).get("succeeded", 0) == 150, 60, interval=0.2)
    finally:
        writer_stop.set()
        writer.join()
    for job_id in ids:
        row = job(engine, job_id)
        assert (row.status, row.attempts) == ("succeeded", 1)
    assert set(effects_are_unique(engine).values()) == {1}
    for worker in started:
        assert worker.stop() == 0
        assert "Traceback" not in worker.log()
    assert len({w.log().split("worker ")[1].split(" ")[0] for w in started}) == 3


def test_same_host_and_pid_get_distinct_ids(engine: sa.Engine, db_url: str) -> None:
    from jobdesk.worker.registry import registry
    from tests.worker.jobmods import basic  # noqa: F401  (registers t.* in the registry)

    reg = Registry()
    for name in ("t.effect",):
        job_type = registry.get(name)
        assert job_type is not None
        reg.add(job_type)
    settings = Settings(database_url=db_url, poll_interval_seconds=0.05, lease_seconds=2)
    config = WorkerConfig.build(settings, concurrency=2)
    runners = [
        Runner(engine, registry=reg, config=config, settings=settings, install_signals=False)
        for _ in range(2)
    ]
    threads = [threading.Thread(target=r.run) for r in runners]
    for t in threads:
        t.start()
    try:
        with engine.begin() as conn:
            enqueue_many(conn, [NewJob("t.effect", {"key": f"f7:{i}"}) for i in range(40)])
        wait_for(lambda: all_done(engine, 40), 20)

        def registered() -> list[Any]:
            with engine.connect() as conn:
                return list(
                    conn.execute(
                        sa.select(workers_table.c.id, workers_table.c.host, workers_table.c.pid)
                    )
                )

        # On SQLite one runner's start may wait out the other's write lock (and retry)
        # while the first drains all 40 jobs: wait for both registrations.
        wait_for(lambda: len(registered()) >= 2, 20)
        rows = registered()
    finally:
        for r in runners:
            r.request_stop()
        for t in threads:
            t.join(20)
    assert len({r.id for r in rows}) == 2
    assert len({(r.host, r.pid) for r in rows}) == 1
    assert runners[0].worker_id != runners[1].worker_id
    assert set(effects_are_unique(engine).values()) == {1}


@pytest.mark.sqlite_only
def test_a_worker_started_before_the_migration_says_so_and_starts_after_it(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'unmigrated.db'}"
    with workers(url, tmp_path) as pool:
        worker = pool.start(wait_ready=False)
        wait_for(lambda: "schema_missing" in worker.log(), 20)
        assert "run `jobdesk migrate`" in worker.log()
        assert worker.alive()
        migrating = make_engine(url)
        upgrade(migrating)
        migrating.dispose()
        wait_for(lambda: "worker_started" in worker.log(), 20)
        assert worker.stop() == 0
