"""Enqueue-commit → handler-start latency with an idle `jobdesk worker`, plus the idle
worker's memory (RSS) and CPU use.

    .venv/bin/python bench/latency.py [--samples 200] [--only postgresql|sqlite]

One job at a time: commit the enqueue, note the wall time, pause 30 ms (the worker runs
the job and is idle again); the handler (`bench.stamp`) returns `time.time()` at its
start, read back at the end — so nothing polls the database while jobs run. PostgreSQL
wakes the worker with LISTEN/NOTIFY; SQLite relies on polling, so its latency is bounded
by the poll interval (reported with it). Idle figures: a second worker with default
settings and no work; RSS from /proc, CPU over 20 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa
from throughput import HERE, JOBDESK, fresh_postgres, fresh_sqlite

from jobdesk import enqueue
from jobdesk.shared.core.db import make_engine
from jobdesk.shared.core.models import jobs
from jobdesk.shared.settings import Settings

POLL_INTERVAL = 0.1
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start_worker(url: str, poll_interval: float | None) -> subprocess.Popen[bytes]:
    env = dict(os.environ, JOBDESK_DATABASE_URL=url)
    if poll_interval is not None:
        env["JOBDESK_POLL_INTERVAL_SECONDS"] = str(poll_interval)
    return subprocess.Popen(
        [str(JOBDESK), "worker", "--jobs", "bench_jobs", "--log-level", "warning"],
        cwd=HERE,
        env=env,
    )


def idle_figures(url: str) -> tuple[float, float]:
    """RSS (MB) and CPU (% of a core) of a worker with default settings and no work."""
    proc = start_worker(url, None)
    try:
        time.sleep(5)
        before = cpu_seconds(proc.pid)
        time.sleep(20)
        return rss_mb(proc.pid), (cpu_seconds(proc.pid) - before) / 20 * 100
    finally:
        proc.terminate()
        proc.wait(30)


def measure(url: str, samples: int) -> dict[str, float]:
    engine = make_engine(url, settings=Settings())
    proc = start_worker(url, POLL_INTERVAL)
    try:
        time.sleep(3)  # start-up, leader election
        committed: dict[int, float] = {}
        for _ in range(samples):
            with engine.begin() as conn:
                job_id = enqueue(conn, "bench.stamp", {})
            committed[job_id] = time.time()
            # No polling while the job runs (it would compete for the CPUs); the worker
            # is idle again before the next enqueue.
            time.sleep(0.03)
        deadline = time.monotonic() + 30
        while True:
            with engine.connect() as conn:
                rows = conn.execute(
                    sa.select(jobs.c.id, jobs.c.result).where(
                        jobs.c.id.in_(list(committed)), jobs.c.status == "succeeded"
                    )
                ).all()
            if len(rows) == samples or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        latencies = [(row.result["t"] - committed[row.id]) * 1000 for row in rows]
    finally:
        proc.terminate()
        proc.wait(30)
        engine.dispose()
    latencies.sort()
    rss, idle_cpu = idle_figures(url)
    return {
        "p50_ms": statistics.median(latencies),
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "max_ms": latencies[-1],
        "rss_mb": rss,
        "idle_cpu_pct": idle_cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--only", choices=["postgresql", "sqlite"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for backend in [args.only] if args.only else ["postgresql", "sqlite"]:
            url = fresh_postgres() if backend == "postgresql" else fresh_sqlite(Path(tmp))
            r = measure(url, args.samples)
            poll = f" (poll interval {POLL_INTERVAL * 1000:.0f} ms)" if backend == "sqlite" else ""
            print(
                f"{backend:<10} enqueue-commit -> handler start: p50 {r['p50_ms']:.1f} ms, "
                f"p99 {r['p99_ms']:.1f} ms, max {r['max_ms']:.1f} ms{poll}; idle worker "
                f"(defaults) RSS {r['rss_mb']:.0f} MB, CPU {r['idle_cpu_pct']:.2f}% of a core",
                flush=True,
            )


if __name__ == "__main__":
    main()
