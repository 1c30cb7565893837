"""Worker throughput: N no-op jobs drained by ONE `jobdesk worker` process, beside a raw
psycopg claim/complete loop (batches of 100, `FOR UPDATE SKIP LOCKED`) in the same run.

    .venv/bin/python bench/throughput.py [--jobs 20000 100000] [--concurrency 200]
                                         [--only postgresql|sqlite] [--skip-raw]

Jobs are enqueued first (not timed); the worker is then started and the rate is
N / (last finished_at - first started_at) as recorded by the database, so process
start-up is not counted. The raw loop drains an identical backlog: one thread, claim
100 rows per statement, mark them succeeded per batch (it writes no attempt rows and no
results — a floor for what any Python worker can do here).

PostgreSQL: JOBDESK_BENCH_POSTGRES_URL, default a fresh database `jobdesk_bench_worker`
on postgresql+psycopg://root@127.0.0.1:5432 (dropped and re-created, then migrated).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import sqlalchemy as sa

from jobdesk import NewJob, enqueue_many
from jobdesk.shared.core.db import make_engine
from jobdesk.shared.core.models import jobs
from jobdesk.shared.migrate import upgrade
from jobdesk.shared.settings import Settings

HERE = Path(__file__).resolve().parent
JOBDESK = Path(sys.executable).with_name("jobdesk")
DEFAULT_PG_SERVER = "postgresql+psycopg://root@127.0.0.1:5432"
PG_DATABASE = "jobdesk_bench_worker"

RAW_CLAIM = """
UPDATE jobdesk_jobs SET status = 'running', attempts = attempts + 1, locked_by = 'raw',
       locked_at = now(), started_at = now(), lease_token = 1,
       lease_expires_at = now() + interval '30 seconds', updated_at = now()
 WHERE id = ANY(ARRAY(
       SELECT id FROM jobdesk_jobs WHERE status IN ('failed', 'queued') AND next_run_at <= now()
        ORDER BY priority, next_run_at, id LIMIT 100 FOR UPDATE SKIP LOCKED))
RETURNING id
"""
RAW_COMPLETE = """
UPDATE jobdesk_jobs SET status = 'succeeded', finished_at = now(), updated_at = now(),
       locked_by = NULL, lease_token = NULL, lease_expires_at = NULL
 WHERE id = ANY(%s) AND status = 'running'
"""


def fresh_postgres() -> str:
    server = os.environ.get("JOBDESK_BENCH_POSTGRES_URL", DEFAULT_PG_SERVER)
    base = sa.make_url(server)
    admin = sa.create_engine(base.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{PG_DATABASE}" WITH (FORCE)'))
        conn.execute(sa.text(f'CREATE DATABASE "{PG_DATABASE}"'))
    admin.dispose()
    url = base.set(database=PG_DATABASE).render_as_string(hide_password=False)
    upgrade(make_engine(url, settings=Settings()))
    return url


def fresh_sqlite(tmp: Path) -> str:
    path = tmp / "bench.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    url = f"sqlite:///{path}"
    engine = make_engine(url, settings=Settings())
    upgrade(engine)
    engine.dispose()
    return url


def reset_and_fill(engine: sa.Engine, n: int) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM jobdesk_job_attempts"))
        conn.execute(sa.delete(jobs))
    batch = [NewJob("bench.noop", {"i": 0}) for _ in range(5000)]
    left = n
    while left > 0:
        with engine.begin() as conn:
            enqueue_many(conn, batch[: min(left, len(batch))])
        left -= len(batch)
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.execute(sa.text("VACUUM ANALYZE jobdesk_jobs"))


def measured_rate(engine: sa.Engine, n: int) -> float:
    with engine.connect() as conn:
        row = conn.execute(
            sa.select(
                sa.func.count(), sa.func.min(jobs.c.started_at), sa.func.max(jobs.c.finished_at)
            ).where(jobs.c.status == "succeeded")
        ).one()
    count, first, last = row
    assert count == n, f"only {count}/{n} succeeded"
    return n / max((last - first).total_seconds(), 1e-9)


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def run_worker(url: str, engine: sa.Engine, n: int, concurrency: int) -> tuple[float, float, float]:
    """(jobs/s by the database's timestamps, wall seconds, worker CPU µs per job)."""
    env = dict(os.environ, JOBDESK_DATABASE_URL=url, JOBDESK_POLL_INTERVAL_SECONDS="0.2")
    proc = subprocess.Popen(
        [
            str(JOBDESK),
            "worker",
            "--jobs",
            "bench_jobs",
            "--concurrency",
            str(concurrency),
            "--log-level",
            "warning",
        ],
        cwd=HERE,
        env=env,
    )
    started = time.monotonic()
    # CPU per job between the first and the last sample that saw jobs done: start-up
    # (imports, registration) is left out; less sensitive to other load than jobs/s.
    first: tuple[int, float] | None = None
    last: tuple[int, float] = (0, 0.0)
    try:
        while True:
            time.sleep(0.25)
            with engine.connect() as conn:
                done = conn.execute(
                    sa.select(sa.func.count()).where(jobs.c.status == "succeeded")
                ).scalar_one()
            cpu = cpu_seconds(proc.pid)
            if done and first is None:
                first = (done, cpu)
            last = (done, cpu)
            if done >= n:
                break
            if proc.poll() is not None:
                raise RuntimeError(f"worker exited with {proc.returncode}")
            if time.monotonic() - started > 600:
                raise RuntimeError("timed out")
    finally:
        proc.terminate()
        proc.wait(30)
    wall = time.monotonic() - started
    cpu_per_job = float("nan")
    if first is not None and last[0] > first[0]:
        cpu_per_job = (last[1] - first[1]) / (last[0] - first[0]) * 1e6
    return measured_rate(engine, n), wall, cpu_per_job


def run_raw_postgres(url: str, n: int) -> tuple[float, float]:
    """(jobs/s, CPU µs per job of this Python loop)."""
    conninfo = sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    done = 0
    with psycopg.connect(conninfo) as conn:
        started = time.perf_counter()
        cpu_started = time.process_time()
        while done < n:
            with conn.transaction():
                ids = [r[0] for r in conn.execute(RAW_CLAIM).fetchall()]
            if not ids:
                break
            with conn.transaction():
                conn.execute(RAW_COMPLETE, (ids,))
            done += len(ids)
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
    assert done == n, f"raw loop drained {done}/{n}"
    return n / elapsed, cpu / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--only", choices=["postgresql", "sqlite"])
    parser.add_argument("--skip-raw", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        backends = [args.only] if args.only else ["postgresql", "sqlite"]
        for backend in backends:
            url = fresh_postgres() if backend == "postgresql" else fresh_sqlite(Path(tmp))
            # DEFERRED: the progress polls only read, so on SQLite they never queue for
            # the write lock the worker is using.
            engine = make_engine(url, settings=Settings(), sqlite_begin="DEFERRED")
            for n in args.jobs:
                reset_and_fill(engine, n)
                rate, wall, cpu = run_worker(url, engine, n, args.concurrency)
                line = f"{backend:<10} {n:>7} jobs  jobdesk worker: {rate:>8,.0f} jobs/s"
                line += f" ({cpu:,.0f} µs CPU/job; wall incl. start-up {wall:.1f}s)"
                if backend == "postgresql" and not args.skip_raw:
                    reset_and_fill(engine, n)
                    raw, raw_cpu = run_raw_postgres(url, n)
                    line += f"   raw psycopg loop: {raw:>8,.0f} jobs/s ({raw_cpu:,.0f} µs CPU/job)"
                    line += f"   ratio {rate / raw:.0%}"
                print(line, flush=True)
            engine.dispose()


if __name__ == "__main__":
    main()
