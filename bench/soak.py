"""Soak: sustained enqueue + drain for a long time with retention on, one row per minute.

    .venv/bin/python bench/soak.py [--minutes 30] [--rate R] [--concurrency 50]
                                   [--retention-minutes 2] [--burst 20000]
                                   [--autovacuum on|off] [--server URL]

Not a CI step: a 30-minute run that shows whether the queue stays as fast at the end as
at the start while the pruner deletes finished jobs behind it (bloat, dead tuples,
autovacuum falling behind).

1. Without `--rate`: a burst of `--burst` no-op jobs is drained by one `jobdesk worker`
   to measure its maximum rate (jobs / (last finished - first started), database
   timestamps); the soak then runs at half of it. The burst's rows are deleted first.
2. The same worker keeps running; this process enqueues at the rate in 100 ms batches
   (`enqueue_many`), the worker drains. Retention keeps succeeded jobs
   `--retention-minutes` and the pruner runs every `--prune-seconds`, so the table
   reaches a steady size after a few minutes.
3. Every minute one row: jobs finished per second, claim latency p50/p99 (from the job's
   `created_at` to its `started_at`: the time a ready job waited to be claimed), jobs
   waiting, the jobs table's heap and index sizes (`pg_relation_size`,
   `pg_indexes_size`), its dead tuples and autovacuum runs (`pg_stat_user_tables`),
   and the attempts table's size.
4. The verdict compares the last minute with the first: claim p99 and throughput within
   20 %, and the heap + index size of the second half no more than 20 % over its first
   reading (bounded, not growing). Exit status 1 when a target is missed.

Database: by default a private PostgreSQL (the torture suite's throw-away server,
`tests/chaos/pgserver.py`) with stock autovacuum and 128 MB shared buffers, deleted
afterwards: a shared test cluster often runs with autovacuum off, which is no
production. `--server URL` (or JOBDESK_BENCH_POSTGRES_URL) soaks a fresh
`jobdesk_bench_soak` database there instead — say which in the figures.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import bench_jobs  # noqa: F401  (enqueue takes the bench types' declared defaults)
import sqlalchemy as sa

from jobdesk import NewJob, enqueue_many
from jobdesk.shared.core.db import make_engine
from jobdesk.shared.migrate import upgrade
from jobdesk.shared.settings import Settings

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the repository root: tests.chaos.pgserver

from tests.chaos.pgserver import PrivatePostgres  # noqa: E402

JOBDESK = Path(sys.executable).with_name("jobdesk")
PRIVATE_SETTINGS = {"shared_buffers": "128MB"}
DATABASE = "jobdesk_bench_soak"
TICK = 0.1
#: Allowed drift of the last minute from the first (claim p99, throughput) and of the
#: table size over the second half of the run.
TOLERANCE = 0.20

MINUTE_SQL = sa.text(
    """
    SELECT count(*) FILTER (WHERE finished_at >= :lo AND finished_at < :hi) AS finished,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - created_at))
               FILTER (WHERE started_at >= :lo AND started_at < :hi) AS p50,
           percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - created_at))
               FILTER (WHERE started_at >= :lo AND started_at < :hi) AS p99
      FROM jobdesk_jobs
     WHERE started_at >= :lo AND started_at < :hi OR finished_at >= :lo AND finished_at < :hi
    """
)
SIZES_SQL = sa.text(
    """
    SELECT pg_relation_size('jobdesk_jobs'), pg_indexes_size('jobdesk_jobs'),
           pg_total_relation_size('jobdesk_job_attempts'),
           s.n_dead_tup, s.n_live_tup, s.autovacuum_count,
           (SELECT count(*) FROM jobdesk_jobs WHERE status IN ('queued', 'failed'))
      FROM pg_stat_user_tables s WHERE s.relname = 'jobdesk_jobs'
    """
)


@dataclass
class Row:
    minute: int
    rate: float
    p50_ms: float
    p99_ms: float
    waiting: int
    heap_mb: float
    index_mb: float
    dead: int
    live: int
    autovacuums: int
    attempts_mb: float

    HEADER = (
        f"{'min':>4} {'jobs/s':>8} {'claim p50':>10} {'claim p99':>10} {'waiting':>8} "
        f"{'jobs MB':>8} {'index MB':>9} {'dead tup':>9} {'live tup':>9} {'autovac':>8} "
        f"{'attempts MB':>12}"
    )

    def line(self) -> str:
        return (
            f"{self.minute:>4} {self.rate:>8.1f} {self.p50_ms:>8.1f}ms {self.p99_ms:>8.1f}ms "
            f"{self.waiting:>8} {self.heap_mb:>8.1f} {self.index_mb:>9.1f} {self.dead:>9} "
            f"{self.live:>9} {self.autovacuums:>8} {self.attempts_mb:>12.1f}"
        )

    @property
    def size_mb(self) -> float:
        return self.heap_mb + self.index_mb


def fresh_database(server: str) -> str:
    base = sa.make_url(server)
    admin = sa.create_engine(base.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)'))
        conn.execute(sa.text(f'CREATE DATABASE "{DATABASE}"'))
    admin.dispose()
    url = base.set(database=DATABASE).render_as_string(hide_password=False)
    engine = make_engine(url, settings=Settings())
    upgrade(engine)
    engine.dispose()
    return url


def start_worker(
    url: str, concurrency: int, retention_minutes: float, prune_seconds: float
) -> subprocess.Popen[bytes]:
    env = dict(
        os.environ,
        JOBDESK_DATABASE_URL=url,
        JOBDESK_RETENTION_SUCCEEDED_DAYS=repr(retention_minutes / 1440),
        JOBDESK_RETENTION_INTERVAL_SECONDS=repr(prune_seconds),
    )
    return subprocess.Popen(
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


def succeeded(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.text("SELECT count(*) FROM jobdesk_jobs WHERE status = 'succeeded'")
            ).scalar_one()
        )


def wait_for_worker(engine: sa.Engine, worker: subprocess.Popen[bytes]) -> None:
    """Until the worker registered itself (imports done, ready to claim)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise RuntimeError(f"worker exited with {worker.returncode}")
        with engine.connect() as conn:
            if conn.execute(sa.text("SELECT count(*) FROM jobdesk_workers")).scalar_one():
                return
        time.sleep(0.2)
    raise RuntimeError("the worker did not register within 2 minutes")


def measure_max(engine: sa.Engine, burst: int) -> float:
    """Enqueue `burst` jobs at once and time the worker's drain by database timestamps."""
    batch = [NewJob("bench.noop", {"i": 0}) for _ in range(1000)]
    left = burst
    while left > 0:
        with engine.begin() as conn:
            enqueue_many(conn, batch[: min(left, len(batch))])
        left -= len(batch)
    deadline = time.monotonic() + 600
    while succeeded(engine) < burst:
        if time.monotonic() > deadline:
            raise RuntimeError("the burst did not drain in 10 minutes")
        time.sleep(0.5)
    with engine.begin() as conn:
        first, last = conn.execute(
            sa.text("SELECT min(started_at), max(finished_at) FROM jobdesk_jobs")
        ).one()
        conn.execute(sa.text("DELETE FROM jobdesk_jobs"))
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        conn.execute(sa.text("VACUUM ANALYZE jobdesk_jobs"))
        conn.execute(sa.text("VACUUM ANALYZE jobdesk_job_attempts"))
    return burst / max((last - first).total_seconds(), 1e-9)


class Enqueuer(threading.Thread):
    """Commits `rate` jobs per second in batches every TICK until stopped."""

    def __init__(self, engine: sa.Engine, rate: float) -> None:
        super().__init__(name="soak-enqueuer", daemon=True)
        self.engine, self.rate = engine, rate
        self.done = 0
        self.behind = 0.0
        self.stopping = threading.Event()

    def run(self) -> None:
        start = time.monotonic()
        while not self.stopping.is_set():
            due = int((time.monotonic() - start) * self.rate)
            count = min(due - self.done, int(self.rate) + 1)
            if count > 0:
                with self.engine.begin() as conn:
                    enqueue_many(conn, [NewJob("bench.noop", {"i": self.done})] * count)
                self.done += count
            self.behind = (due - self.done) / self.rate
            self.stopping.wait(TICK)


def minute_row(engine: sa.Engine, minute: int, lo: float, hi: float) -> Row:
    with engine.connect() as conn:
        params = {"lo": _ts(lo), "hi": _ts(hi)}
        finished, p50, p99 = conn.execute(MINUTE_SQL, params).one()
        heap, index, attempts, dead, live, autovacuums, waiting = conn.execute(SIZES_SQL).one()
    mb = 1024 * 1024
    return Row(
        minute=minute,
        rate=finished / (hi - lo),
        p50_ms=float(p50 or 0) * 1000,
        p99_ms=float(p99 or 0) * 1000,
        waiting=int(waiting),
        heap_mb=heap / mb,
        index_mb=index / mb,
        dead=int(dead or 0),
        live=int(live or 0),
        autovacuums=int(autovacuums or 0),
        attempts_mb=attempts / mb,
    )


def _ts(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def verdict(rows: list[Row]) -> list[str]:
    """The targets missed (empty: all held)."""
    first, last = rows[0], rows[-1]
    missed = []
    if last.p99_ms > first.p99_ms * (1 + TOLERANCE):
        missed.append(f"claim p99 {first.p99_ms:.1f} -> {last.p99_ms:.1f} ms (> +20 %)")
    if abs(last.rate - first.rate) > first.rate * TOLERANCE:
        missed.append(f"throughput {first.rate:.1f} -> {last.rate:.1f} jobs/s (> 20 % off)")
    half = rows[len(rows) // 2 :]
    if len(half) >= 2 and max(r.size_mb for r in half) > half[0].size_mb * (1 + TOLERANCE):
        peak = max(r.size_mb for r in half)
        missed.append(
            f"jobs heap + indexes grew {half[0].size_mb:.1f} -> {peak:.1f} MB "
            "over the second half (> +20 %)"
        )
    return missed


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # so the worker is stopped in `main`'s finally


def main() -> int:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=int, default=30)
    parser.add_argument("--rate", type=float, help="jobs/s (default: half the measured max)")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--burst", type=int, default=20000, help="jobs to measure the max")
    parser.add_argument("--retention-minutes", type=float, default=2.0)
    parser.add_argument("--prune-seconds", type=float, default=20.0)
    parser.add_argument(
        "--autovacuum",
        choices=("on", "off"),
        default="on",
        help="the private server's autovacuum (off: to see what it is worth)",
    )
    parser.add_argument(
        "--server",
        default=os.environ.get("JOBDESK_BENCH_POSTGRES_URL"),
        help="a PostgreSQL server URL (default: a private server for this run)",
    )
    args = parser.parse_args()
    if args.minutes < 2:
        parser.error("--minutes must be at least 2 (first and last minute are compared)")
    if args.rate is not None and args.rate <= 0:
        parser.error("--rate must be positive")

    private = None
    if args.server:
        url = fresh_database(args.server)
    else:
        private = PrivatePostgres(
            settings={**PRIVATE_SETTINGS, "autovacuum": args.autovacuum}
        ).setup()
        url = fresh_database(private.url.rsplit("/", 1)[0])
    engine = make_engine(url, settings=Settings(), pool_size=2)
    with engine.connect() as conn:
        autovacuum = conn.execute(sa.text("SHOW autovacuum")).scalar_one()
    where = "private server" if private else sa.make_url(url).render_as_string()
    print(f"database: {where}, autovacuum {autovacuum}")
    worker = start_worker(url, args.concurrency, args.retention_minutes, args.prune_seconds)
    try:
        wait_for_worker(engine, worker)
        rate = args.rate
        if rate is None:
            peak = measure_max(engine, args.burst)
            rate = peak / 2
            print(f"max {peak:.0f} jobs/s over a {args.burst}-job burst; soaking at {rate:.0f}/s")
        print(
            f"{args.minutes} min at {rate:.0f} jobs/s, concurrency {args.concurrency}, "
            f"succeeded jobs kept {args.retention_minutes:g} min, pruner every "
            f"{args.prune_seconds:g} s",
            flush=True,
        )
        enqueuer = Enqueuer(engine, rate)
        enqueuer.start()
        start = time.time()
        print(Row.HEADER, flush=True)
        rows: list[Row] = []
        for minute in range(1, args.minutes + 1):
            end = start + 60 * minute
            while time.time() < end + 1:  # +1 s: the minute's last jobs finish
                if worker.poll() is not None:
                    raise RuntimeError(f"worker exited with {worker.returncode}")
                time.sleep(0.5)
            row = minute_row(engine, minute, end - 60, end)
            rows.append(row)
            lag = f"  (enqueuer {enqueuer.behind:.1f}s behind)" if enqueuer.behind > 1 else ""
            print(row.line() + lag, flush=True)
        enqueuer.stopping.set()
        enqueuer.join(10)
    finally:
        worker.terminate()
        worker.wait(30)
        engine.dispose()
        if private is not None:
            private.teardown()
    print("first: " + rows[0].line())
    print("last:  " + rows[-1].line())
    missed = verdict(rows)
    for line in missed:
        print(f"MISSED: {line}")
    print("targets held" if not missed else f"{len(missed)} target(s) missed")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
