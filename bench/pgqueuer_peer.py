"""PgQueuer 1.6 as a peer in `bench/throughput.py`: its own virtualenv, database and
measurement, driven from Jobdesk's bench process.

PgQueuer is installed into `bench/.venv-pgqueuer` (git-ignored) the first time it is
needed — pinned to `PIN`, with asyncpg — and never into Jobdesk's environment or
dependencies. Its schema comes from its own `pgq install`, in a database of its own
(`jobdesk_bench_pgqueuer` on the bench server). Each drain: `pgqueuer_consumer.py fill`
enqueues the backlog (untimed), `VACUUM ANALYZE` and `CHECKPOINT` as for Jobdesk, then
the consumer (PgQueuer's `pgq run` loop in drain mode) runs until the queue is empty and
exits. Rate = N / (last `successful` log row - first handler call); PgQueuer deletes
finished jobs, so the remaining rows of its queue table tell the progress (and the CPU
per job is sampled exactly as for the Jobdesk worker).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import sqlalchemy as sa
from quiet_db import autovacuum_off

HERE = Path(__file__).resolve().parent
VENV = HERE / ".venv-pgqueuer"
PIN = "pgqueuer[asyncpg]==1.6.*"
VERSION_PREFIX = "1.6."
DATABASE = "jobdesk_bench_pgqueuer"
#: PgQueuer's best configuration on this benchmark: one consumer, batches of 100.
BATCH_SIZE = 100
DRAIN_TIMEOUT_SECONDS = 600


def _bin(name: str) -> str:
    return str(VENV / "bin" / name)


def _installed_version() -> str | None:
    if not Path(_bin("pgq")).exists():
        return None
    probe = subprocess.run(
        [_bin("python"), "-c", "import importlib.metadata as m; print(m.version('pgqueuer'))"],
        capture_output=True,
        text=True,
        check=False,
    )
    return probe.stdout.strip() if probe.returncode == 0 else None


def ensure_venv() -> None:
    """Create `bench/.venv-pgqueuer` with PgQueuer `PIN` unless it is there already."""
    version = _installed_version()
    if version is not None and version.startswith(VERSION_PREFIX):
        return
    print(f"installing {PIN} into {VENV} (once) …", file=sys.stderr, flush=True)
    if not Path(_bin("python")).exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run(
        [_bin("python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", PIN],
        check=True,
    )


def fresh_database(server_url: str) -> str:
    """Drop and re-create PgQueuer's database, install its schema; returns its DSN."""
    base = sa.make_url(server_url)
    admin = sa.create_engine(base.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)'))
        conn.execute(sa.text(f'CREATE DATABASE "{DATABASE}"'))
    admin.dispose()
    dsn = (
        base.set(drivername="postgresql", database=DATABASE)
        .render_as_string(hide_password=False)
        .replace("postgresql+psycopg://", "postgresql://")
    )
    subprocess.run(
        [_bin("pgq"), "--pg-dsn", dsn, "install"], check=True, cwd=HERE, capture_output=True
    )
    autovacuum_off(dsn)
    return dsn


def _remaining(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pgqueuer").fetchone()
    return int(row[0]) if row else 0


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def drain(dsn: str, n: int) -> tuple[float, float]:
    """(jobs/s, consumer CPU µs per job) for one drain of `n` no-op jobs."""
    env = dict(os.environ, PGDSN=dsn)
    subprocess.run(
        [_bin("python"), "pgqueuer_consumer.py", "fill", str(n)], check=True, cwd=HERE, env=env
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE pgqueuer")
        conn.execute("VACUUM ANALYZE pgqueuer_log")
        conn.execute("CHECKPOINT")  # as before every drain in `throughput.py`
    with tempfile.TemporaryDirectory() as tmp:
        stamp = Path(tmp) / "first-call"
        env["PGQUEUER_BENCH_STAMP"] = str(stamp)
        proc = subprocess.Popen(
            [_bin("python"), "pgqueuer_consumer.py", "run", str(BATCH_SIZE)],
            cwd=HERE,
            env=env,
        )
        started = time.monotonic()
        first: tuple[int, float] | None = None
        last: tuple[int, float] = (0, 0.0)
        try:
            while proc.poll() is None:
                time.sleep(0.25)
                done = n - _remaining(dsn)
                try:
                    cpu = _cpu_seconds(proc.pid)
                except (FileNotFoundError, ProcessLookupError):
                    break  # exited between poll() and the sample
                if done and first is None:
                    first = (done, cpu)
                if done < n:  # the last samples may be after the drain (shutdown)
                    last = (done, cpu)
                if time.monotonic() - started > DRAIN_TIMEOUT_SECONDS:
                    raise RuntimeError("PgQueuer drain timed out")
        finally:
            if proc.poll() is None:
                proc.terminate()
            proc.wait(30)
        if proc.returncode != 0:
            raise RuntimeError(f"PgQueuer consumer exited with {proc.returncode}")
        t0 = float(stamp.read_text())
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*), extract(epoch FROM max(created)) FROM pgqueuer_log"
            " WHERE status = 'successful'"
        ).fetchone()
    assert row is not None
    count, t1 = int(row[0]), float(row[1])
    assert count == n, f"PgQueuer: only {count}/{n} successful"
    cpu_per_job = float("nan")
    if first is not None and last[0] > first[0]:
        cpu_per_job = (last[1] - first[1]) / (last[0] - first[0]) * 1e6
    return n / max(t1 - t0, 1e-9), cpu_per_job
