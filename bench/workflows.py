"""Batches: what putting 10,000 jobs in one batch costs, at enqueue and at drain.

    .venv/bin/python bench/workflows.py [--jobs 10000] [--rounds 3] [--only postgresql|sqlite]

Three figures, each measured side by side with its baseline in alternating rounds:

- enqueue: `enqueue_batch` of N no-op children with an `on_success` callback, against
  `enqueue_many` of the same N jobs — one transaction each, wall time to commit;
- drain: one `jobdesk worker` (default options) drains N children of one batch, against
  the same N jobs without a batch — jobs/s by the database's timestamps (first start to
  last finish of the N, so process start-up is not counted);
- callback delay: from the last child's finish to the start of `on_success` (the
  settle trigger releases it in the transaction of the last completion; PostgreSQL's
  NOTIFY then wakes the worker).

PostgreSQL: JOBDESK_BENCH_POSTGRES_URL, a fresh database `jobdesk_bench_workflows` on
postgresql+psycopg://root@127.0.0.1:5432 (dropped and re-created, then migrated).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import bench_jobs  # noqa: F401  (the enqueue-time defaults of the bench's job types)
import sqlalchemy as sa
from throughput import fresh_postgres, fresh_sqlite, run_worker

from jobdesk import NewJob, enqueue_batch, enqueue_many
from jobdesk.shared.core.db import make_engine
from jobdesk.shared.core.models import jobs
from jobdesk.shared.settings import Settings
from jobdesk.shared.workflows.models import batches

DATABASE = "jobdesk_bench_workflows"


def children(n: int) -> list[NewJob]:
    return [NewJob("bench.noop", {"i": i}) for i in range(n)]


def reset(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM jobdesk_job_attempts"))
        conn.execute(sa.delete(jobs))
        conn.execute(sa.delete(batches))
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.execute(sa.text("VACUUM ANALYZE jobdesk_jobs, jobdesk_job_attempts"))
            conn.execute(sa.text("CHECKPOINT"))


def timed(engine: sa.Engine, write: Callable[[sa.Connection], object]) -> float:
    reset(engine)
    started = time.perf_counter()
    with engine.begin() as conn:
        write(conn)
    return time.perf_counter() - started


def fill_plain(conn: sa.Connection, n: int) -> None:
    enqueue_many(conn, children(n))


def fill_batch(conn: sa.Connection, n: int) -> None:
    enqueue_batch(conn, children(n), on_success=NewJob("bench.stamp", {}), name="bench batch")


def children_rate(engine: sa.Engine, batched: bool) -> float:
    """jobs/s of the no-op jobs (the batch's children, or the plain jobs)."""
    with engine.connect() as conn:
        count, first, last = conn.execute(
            sa.select(
                sa.func.count(), sa.func.min(jobs.c.started_at), sa.func.max(jobs.c.finished_at)
            ).where(
                jobs.c.status == "succeeded",
                jobs.c.job_type == "bench.noop",
                jobs.c.batch_id.is_not(None) if batched else jobs.c.batch_id.is_(None),
            )
        ).one()
    return float(count) / max((last - first).total_seconds(), 1e-9)


def callback_delay(engine: sa.Engine) -> float:
    """Seconds from the last child's finish to the callback's start."""
    with engine.connect() as conn:
        last_child = conn.execute(
            sa.select(sa.func.max(jobs.c.finished_at)).where(jobs.c.job_type == "bench.noop")
        ).scalar_one()
        callback = conn.execute(
            sa.select(jobs.c.started_at).where(jobs.c.job_type == "bench.stamp")
        ).scalar_one()
    return float((callback - last_child).total_seconds())


def drain(url: str, engine: sa.Engine, n: int, batched: bool) -> tuple[float, float | None]:
    reset(engine)
    with engine.begin() as conn:
        (fill_batch if batched else fill_plain)(conn, n)
    run_worker(url, engine, n + (1 if batched else 0), [])
    return children_rate(engine, batched), callback_delay(engine) if batched else None


def run(name: str, url: str, n: int, rounds: int) -> None:
    engine = make_engine(url, settings=Settings())
    enqueue_plain: list[float] = []
    enqueue_batched: list[float] = []
    drain_plain: list[float] = []
    drain_batched: list[float] = []
    delays: list[float] = []
    for round_ in range(rounds):
        order = [False, True] if round_ % 2 == 0 else [True, False]
        for batched in order:
            writer = fill_batch if batched else fill_plain
            seconds = timed(engine, lambda conn, writer=writer: writer(conn, n))
            (enqueue_batched if batched else enqueue_plain).append(seconds)
        for batched in order:
            rate, delay = drain(url, engine, n, batched)
            (drain_batched if batched else drain_plain).append(rate)
            if delay is not None:
                delays.append(delay)
        print(
            f"{name} round {round_ + 1}: enqueue {enqueue_plain[-1] * 1000:,.0f} ms plain, "
            f"{enqueue_batched[-1] * 1000:,.0f} ms batch; drain {drain_plain[-1]:,.0f} "
            f"plain, {drain_batched[-1]:,.0f} batch jobs/s; callback after {delays[-1]:.3f} s",
            flush=True,
        )
    med = statistics.median
    print(
        f"{name} {n} jobs, median of {rounds}: enqueue_batch/enqueue_many "
        f"{med(enqueue_batched) / med(enqueue_plain):.2f}x time "
        f"({med(enqueue_batched) * 1000:,.0f} vs {med(enqueue_plain) * 1000:,.0f} ms); "
        f"drain batch/plain {med(drain_batched) / med(drain_plain):.2f} "
        f"({med(drain_batched):,.0f} vs {med(drain_plain):,.0f} jobs/s); "
        f"callback started {max(delays):.3f} s at most after the last child"
    )
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=("postgresql", "sqlite"))
    args = parser.parse_args()
    if args.only != "sqlite":
        run("postgresql", fresh_postgres(database=DATABASE), args.jobs, args.rounds)
    if args.only != "postgresql":
        with tempfile.TemporaryDirectory() as tmp:
            run("sqlite", fresh_sqlite(Path(tmp)), args.jobs, args.rounds)


if __name__ == "__main__":
    main()
