"""Worker throughput: N no-op jobs drained by ONE `jobdesk worker` process, side by side
with PgQueuer 1.6 and a raw psycopg claim/complete loop, in alternating rounds.

    .venv/bin/python bench/throughput.py [--jobs 20000 100000] [--worker-args "..."]
                                         [--rounds 3] [--only postgresql|sqlite]
                                         [--skip-raw] [--skip-pgqueuer]
                                         [--via-pgbouncer] [--database NAME]
    .venv/bin/python bench/throughput.py --ci-guard     # CI: Jobdesk vs raw, exit 1 if slow
    .venv/bin/python bench/throughput.py --async-handlers [--jobs 20000] [--rounds 3]
    .venv/bin/python bench/throughput.py --keyed [--jobs 20000] [--rounds 3]
    .venv/bin/python bench/throughput.py --otel [--jobs 20000] [--rounds 3]

Jobs are enqueued first (not timed); the consumer is then started and the rate is N /
(last finished - first started) as recorded by the database, so process start-up is not
counted. On PostgreSQL every round drains an identical fresh backlog once with each of
the three (each drain starting after a `CHECKPOINT`), in a rotating order so that load
from elsewhere on the machine hits them alike; the medians follow, and the ratios
Jobdesk/PgQueuer and Jobdesk/raw as the median of each round's ratio (drains run back to
back share the machine's load) and as the ratio of the medians. Compare ratios from one
run, never absolute figures across runs.

- Jobdesk: `jobdesk worker --jobs bench_jobs --log-level warning` — default options
  (10 slots), with no `JOBDESK_*` setting but the database URL passed on; `--worker-args`
  appends options (e.g. `--worker-args "--concurrency 200"`). The command and the slots
  the worker registered are printed.
- PgQueuer 1.6 (`pgqueuer_peer.py`): asyncpg, 1 consumer, batches of 100 — its best
  configuration here — in its own virtualenv (`bench/.venv-pgqueuer`, created on first
  use) and its own database, schema from `pgq install`.
- raw: one thread, claim 100 rows per statement (`FOR UPDATE SKIP LOCKED`), mark them
  succeeded per batch. It writes no attempt rows and no results: a floor for what any
  Python worker can do here, on Jobdesk's own table.
- `--via-pgbouncer` adds `jobdesk-pgbouncer`: the same worker with `JOBDESK_PGBOUNCER=1`
  through a private PgBouncer (transaction pooling, `tests/pgbouncer.py`), LISTEN on a
  direct connection (`JOBDESK_LISTEN_URL`), in the same rounds as the direct worker; and
  `jobdesk-pgbouncer-role`: the same with `JOBDESK_DB_TIMEOUTS_FROM_ROLE=1` (the bench
  database gets `ALTER DATABASE … SET statement_timeout = '30s'` and `jit = off`, as the
  production guide says; the direct worker then runs without JIT too).

`--ci-guard`: `GUARD_JOBS` jobs, `GUARD_ROUNDS` alternating rounds of Jobdesk and the raw
loop on PostgreSQL; prints the figures and exits non-zero when the median of the rounds'
Jobdesk/raw ratios is below `GUARD_FLOOR`. A ratio within one run, never a time.

PostgreSQL: JOBDESK_BENCH_POSTGRES_URL, default fresh databases `jobdesk_bench_worker`
and `jobdesk_bench_pgqueuer` on postgresql+psycopg://root@127.0.0.1:5432 (dropped and
re-created, then migrated / installed).
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

# Registers the bench types here too: enqueue then takes their declared queue, attempts,
# timeout and concurrency limit, as an app that imports its job module does (a fresh
# bench database has no published types, and `--keyed` jobs would carry no limit).
import bench_jobs  # noqa: F401
import pgqueuer_peer
import psycopg
import sqlalchemy as sa
from quiet_db import autovacuum_off

from jobdesk import NewJob, enqueue_many
from jobdesk.shared.core.db import make_engine
from jobdesk.shared.core.models import jobs, workers
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


def fresh_postgres(server: str | None = None, database: str = PG_DATABASE) -> str:
    server = server or os.environ.get("JOBDESK_BENCH_POSTGRES_URL", DEFAULT_PG_SERVER)
    base = sa.make_url(server)
    admin = sa.create_engine(base.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
        conn.execute(sa.text(f'CREATE DATABASE "{database}"'))
    admin.dispose()
    url = base.set(database=database).render_as_string(hide_password=False)
    upgrade(make_engine(url, settings=Settings()))
    autovacuum_off(base.set(drivername="postgresql", database=database).render_as_string(False))
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


def reset_and_fill(engine: sa.Engine, n: int, job_type: str = "bench.noop", keys: int = 0) -> None:
    """A fresh backlog of `n` jobs; with `keys`, job i has concurrency key `k{i % keys}`."""
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM jobdesk_job_attempts"))
        conn.execute(sa.delete(jobs))
    batch = [
        NewJob(job_type, {"i": 0}, concurrency_key=f"k{i % keys}" if keys else None)
        for i in range(5000)
    ]
    left = n
    while left > 0:
        with engine.begin() as conn:
            enqueue_many(conn, batch[: min(left, len(batch))])
        left -= len(batch)
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            # The attempts too: their deleted rows would bring autovacuum into the drain.
            conn.execute(sa.text("VACUUM ANALYZE jobdesk_jobs, jobdesk_job_attempts"))
            # Every PostgreSQL drain (Jobdesk, PgQueuer, raw) starts right after a
            # checkpoint: the first change to a page after one writes the whole page to
            # the WAL, so a drain that a checkpoint started in the middle of ran up to a
            # third slower than its neighbours, and that spread hid real differences.
            conn.execute(sa.text("CHECKPOINT"))


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


class Measured(NamedTuple):
    rate: float
    """jobs/s"""
    cpu_us: float
    """CPU µs per job of the consumer process (the raw loop: of this process)"""
    slots: int | None = None
    """Jobdesk: the slots the worker registered (what was measured)"""


#: The worker as a user starts it; `--worker-args` adds to this.
WORKER_COMMAND = ("worker", "--jobs", "bench_jobs", "--log-level", "warning")


def worker_env(url: str) -> dict[str, str]:
    """This environment without any `JOBDESK_*` setting (a `JOBDESK_CONCURRENCY` left in
    the shell would silently change what is measured), plus the bench database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBDESK_")}
    env["JOBDESK_DATABASE_URL"] = url
    return env


def describe_worker(worker_args: Sequence[str]) -> str:
    return shlex.join(["jobdesk", *WORKER_COMMAND, *worker_args])


def registered_slots(engine: sa.Engine, pid: int) -> int | None:
    """The slots the worker process `pid` registered (its `jobdesk_workers.concurrency`)."""
    with engine.connect() as conn:
        return conn.execute(
            sa.select(workers.c.concurrency).where(workers.c.pid == pid).limit(1)
        ).scalar_one_or_none()


def run_worker(
    url: str,
    engine: sa.Engine,
    n: int,
    worker_args: Sequence[str],
    extra_env: dict[str, str] | None = None,
    prefix: Sequence[str] = (),
) -> Measured:
    """One `jobdesk worker` drains the backlog; jobs/s by the database's timestamps."""
    proc = subprocess.Popen(
        [*prefix, str(JOBDESK), *WORKER_COMMAND, *worker_args],
        cwd=HERE,
        env=worker_env(url) | (extra_env or {}),
    )
    slots: int | None = None
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
                slots = registered_slots(engine, proc.pid)
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
    cpu_per_job = float("nan")
    if first is not None and last[0] > first[0]:
        cpu_per_job = (last[1] - first[1]) / (last[0] - first[0]) * 1e6
    return Measured(measured_rate(engine, n), cpu_per_job, slots)


def run_raw_postgres(url: str, n: int) -> Measured:
    """The raw loop drains the backlog (CPU µs per job of this Python loop)."""
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
    return Measured(n / elapsed, cpu / n * 1e6)


#: The consumers, by the names the output uses.
WORKER, PGQUEUER, RAW = "jobdesk", "pgqueuer", "raw"
BOUNCED, BOUNCED_ROLE = "jobdesk-pgbouncer", "jobdesk-pgbouncer-role"
Drain = Callable[[int], Measured]


def postgres_drains(
    server: str, systems: Sequence[str], worker_args: Sequence[str], database: str = PG_DATABASE
) -> dict[str, Drain]:
    """One fresh database per system; each drain starts from a fresh backlog of n."""
    url = fresh_postgres(server, database)
    engine = make_engine(url, settings=Settings())
    drains: dict[str, Drain] = {}
    if WORKER in systems:

        def jobdesk_drain(n: int) -> Measured:
            reset_and_fill(engine, n)
            return run_worker(url, engine, n, worker_args)

        drains[WORKER] = jobdesk_drain
    if PGQUEUER in systems:
        pgqueuer_peer.ensure_venv()
        dsn = pgqueuer_peer.fresh_database(server)
        drains[PGQUEUER] = lambda n: Measured(*pgqueuer_peer.drain(dsn, n))
    if RAW in systems:

        def raw_drain(n: int) -> Measured:
            reset_and_fill(engine, n)
            return run_raw_postgres(url, n)

        drains[RAW] = raw_drain
    if BOUNCED in systems:
        sys.path.insert(0, str(HERE.parent))
        from tests.pgbouncer import PgBouncer

        # Before PgBouncer opens a server connection, so every one starts with it.
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.execute(sa.text(f'ALTER DATABASE "{database}" SET statement_timeout = 30000'))
            conn.execute(sa.text(f'ALTER DATABASE "{database}" SET jit = off'))
        bouncer = PgBouncer(*_host_port(url)).start()
        bounced_url = bouncer.url_for(url)
        per_transaction = {"JOBDESK_PGBOUNCER": "1", "JOBDESK_LISTEN_URL": url}
        from_role = per_transaction | {"JOBDESK_DB_TIMEOUTS_FROM_ROLE": "1"}

        def bounced_drain(n: int, env: dict[str, str]) -> Measured:
            reset_and_fill(engine, n)
            return run_worker(bounced_url, engine, n, worker_args, env)

        drains[BOUNCED] = lambda n: bounced_drain(n, per_transaction)
        drains[BOUNCED_ROLE] = lambda n: bounced_drain(n, from_role)
    return drains


def _host_port(url: str) -> tuple[str, int]:
    parsed = sa.make_url(url)
    return parsed.host or "127.0.0.1", parsed.port or 5432


def rounds(drains: dict[str, Drain], n: int, count: int) -> dict[str, list[Measured]]:
    """`count` rounds; round r starts with the r-th system (rotating order)."""
    names = list(drains)
    results: dict[str, list[Measured]] = {name: [] for name in names}
    for index in range(count):
        order = names[index % len(names) :] + names[: index % len(names)]
        cells = []
        for name in order:
            got = drains[name](n)
            results[name].append(got)
            cells.append(f"{name} {got.rate:>8,.0f}")
        print(f"  {n:>7} jobs  round {index + 1}: " + "   ".join(cells), flush=True)
    return results


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def slots(got: Sequence[Measured]) -> str:
    """`, 10 slots`: what the Jobdesk worker registered (nothing for the others)."""
    seen = sorted({m.slots for m in got if m.slots is not None})
    return f", {'/'.join(map(str, seen))} slots" if seen else ""


def summary(backend: str, n: int, results: dict[str, list[Measured]]) -> dict[str, float]:
    """Print the medians (and the ratios against Jobdesk); returns the median rates."""
    rates = {name: median([m.rate for m in got]) for name, got in results.items()}
    parts = []
    for name, got in results.items():
        cpu = median([m.cpu_us for m in got])
        parts.append(f"{name}: {rates[name]:>8,.0f} jobs/s ({cpu:,.0f} µs CPU/job{slots(got)})")
    line = f"{backend:<10} {n:>7} jobs  median of {len(next(iter(results.values())))}  "
    line += "   ".join(parts)
    print(line, flush=True)
    for peer in (PGQUEUER, RAW, BOUNCED, BOUNCED_ROLE):
        if WORKER in rates and peer in rates:
            # Each round's ratio compares drains run back to back, under the same load from
            # elsewhere; the median of those is the figure to trust on a shared machine.
            ratios = round_ratios(results, peer)
            print(
                f"{'':<10} {n:>7} jobs  jobdesk/{peer}: {median(ratios):.2f} median of rounds "
                f"({', '.join(f'{r:.2f}' for r in ratios)}); "
                f"of medians {rates[WORKER] / rates[peer]:.2f}",
                flush=True,
            )
    return rates


def round_ratios(results: dict[str, list[Measured]], peer: str) -> list[float]:
    """Jobdesk's rate over `peer`'s, round by round."""
    return [j.rate / o.rate for j, o in zip(results[WORKER], results[peer], strict=True)]


#: The CI guard: a short side-by-side run; fails below this Jobdesk/raw ratio. Five
#: rounds, because one drain of 10,000 jobs lasts under half a second and a shared
#: machine has made single rounds of the same code read 43 % beside 139 %: the median of
#: five fails only when three rounds are slow.
GUARD_JOBS = 10_000
GUARD_ROUNDS = 5
GUARD_FLOOR = 0.40


def ci_guard(server: str, worker_args: Sequence[str], database: str = PG_DATABASE) -> int:
    drains = postgres_drains(server, [WORKER, RAW], worker_args, database)
    results = rounds(drains, GUARD_JOBS, GUARD_ROUNDS)
    rates = summary("postgresql", GUARD_JOBS, results)
    ratios = round_ratios(results, RAW)
    ratio = median(ratios)
    verdict = "ok" if ratio >= GUARD_FLOOR else "FAIL"
    print(
        f"throughput guard: jobdesk {rates[WORKER]:,.0f} jobs/s, raw loop {rates[RAW]:,.0f} "
        f"jobs/s; median ratio {ratio:.0%} (rounds: "
        f"{', '.join(f'{r:.0%}' for r in ratios)}; floor {GUARD_FLOOR:.0%}): {verdict}",
        flush=True,
    )
    return 0 if ratio >= GUARD_FLOOR else 1


#: `--async-handlers`: the same default worker draining plain no-op handlers, `async def`
#: no-op handlers and `async def` handlers that await 50 ms, in rotating rounds.
ASYNC_KINDS = {
    "sync no-op": "bench.noop",
    "async no-op": "bench.async_noop",
    "async 50 ms": "bench.async_wait",
}


def async_handlers(
    server: str, n: int, count: int, worker_args: Sequence[str], database: str = PG_DATABASE
) -> None:
    url = fresh_postgres(server, database)
    engine = make_engine(url, settings=Settings())

    def drain_of(job_type: str) -> Drain:
        def drain(size: int) -> Measured:
            reset_and_fill(engine, size, job_type)
            return run_worker(url, engine, size, worker_args)

        return drain

    drains = {name: drain_of(job_type) for name, job_type in ASYNC_KINDS.items()}
    results = rounds(drains, n, count)
    rates = {name: median([m.rate for m in got]) for name, got in results.items()}
    for name, got in results.items():
        cpu = median([m.cpu_us for m in got])
        print(f"  {name:<12} {rates[name]:>8,.0f} jobs/s median ({cpu:,.0f} µs CPU/job)")
    ratios = [
        a.rate / s.rate for a, s in zip(results["async no-op"], results["sync no-op"], strict=True)
    ]
    print(
        f"async no-op / sync no-op: {median(ratios):.2f} median of rounds "
        f"({', '.join(f'{r:.2f}' for r in ratios)}); async handlers awaiting 50 ms: "
        f"{rates['async 50 ms']:,.0f} jobs/s with one worker process",
        flush=True,
    )
    engine.dispose()


def report_against_first(results: dict[str, list[Measured]]) -> None:
    """Each drain's median rate and CPU per job, then every later drain's rate against
    the first one's (the median of the rounds' ratios: drains of a round share its load)."""
    width = max(len(name) for name in results)
    for name, got in results.items():
        rate, cpu = median([m.rate for m in got]), median([m.cpu_us for m in got])
        print(f"  {name:<{width}} {rate:>8,.0f} jobs/s median ({cpu:,.0f} µs CPU/job)")
    first, *others = results
    for name in others:
        ratios = [d.rate / b.rate for d, b in zip(results[name], results[first], strict=True)]
        print(
            f"{name} / {first}: {median(ratios):.2f} median of rounds "
            f"({', '.join(f'{r:.2f}' for r in ratios)})",
            flush=True,
        )


#: `opentelemetry-instrument` sets the SDK up from these: a tracer provider that records
#: every span and exports none (the cost of the instrumentation, not of an exporter).
TRACED_ENV = {
    "OTEL_TRACES_EXPORTER": "none",
    "OTEL_METRICS_EXPORTER": "none",
    "OTEL_LOGS_EXPORTER": "none",
    "OTEL_SERVICE_NAME": "jobdesk-bench",
}
#: Sets the SDK up as an app does, exporters that drop everything (`otel_noop/`).
NOOP_EXPORTER_SETUP = HERE / "otel_noop"


def with_noop_exporter(env: dict[str, str]) -> dict[str, str]:
    """The worker's environment with `otel_noop/sitecustomize.py` loaded at start-up."""
    paths = [str(NOOP_EXPORTER_SETUP), *filter(None, [env.get("PYTHONPATH")])]
    return {"PYTHONPATH": os.pathsep.join(paths)}


def traced(
    server: str, n: int, count: int, worker_args: Sequence[str], database: str = PG_DATABASE
) -> None:
    """The default worker without and with an OpenTelemetry SDK (every attempt a span):
    set up by `opentelemetry-instrument` with no exporter (no span processor, no metric
    reader), and set up as an app does with exporters that drop what they get."""
    url = fresh_postgres(server, database)
    engine = make_engine(url, settings=Settings())
    instrument = [str(JOBDESK.with_name("opentelemetry-instrument"))]
    noop_env = with_noop_exporter(worker_env(url))

    def plain(size: int) -> Measured:
        reset_and_fill(engine, size)
        return run_worker(url, engine, size, worker_args)

    def with_sdk(size: int) -> Measured:
        reset_and_fill(engine, size)
        return run_worker(url, engine, size, worker_args, TRACED_ENV, instrument)

    def with_noop(size: int) -> Measured:
        reset_and_fill(engine, size)
        return run_worker(url, engine, size, worker_args, noop_env)

    drains = {"untraced": plain, "SDK, no exporter": with_sdk, "SDK, no-op exporter": with_noop}
    report_against_first(rounds(drains, n, count))
    engine.dispose()


#: `--keyed`: what each drain enqueues (job type, distinct concurrency keys).
KEYED_KINDS = {
    "no key": ("bench.noop", 0),
    "1,000 keys, no limit": ("bench.noop", 1000),
    "1,000 keys, limit 100": ("bench.keyed_noop", 1000),
}


def keyed(
    server: str, n: int, count: int, worker_args: Sequence[str], database: str = PG_DATABASE
) -> None:
    """The default worker on jobs without a key, and with a concurrency key on every job
    (1,000 keys: a fair place in line only, or a limit of 100 that is never reached)."""
    url = fresh_postgres(server, database)
    engine = make_engine(url, settings=Settings())

    def drain_of(job_type: str, keys: int) -> Drain:
        def drain(size: int) -> Measured:
            reset_and_fill(engine, size, job_type, keys)
            return run_worker(url, engine, size, worker_args)

        return drain

    drains = {name: drain_of(*kind) for name, kind in KEYED_KINDS.items()}
    report_against_first(rounds(drains, n, count))
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument(
        "--worker-args",
        default="",
        metavar="ARGS",
        help='extra `jobdesk worker` options, e.g. "--concurrency 200" (default: none)',
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=["postgresql", "sqlite"])
    parser.add_argument("--skip-raw", action="store_true")
    parser.add_argument("--skip-pgqueuer", action="store_true")
    parser.add_argument(
        "--via-pgbouncer",
        action="store_true",
        help="also drain with the worker through a private PgBouncer (transaction pooling)",
    )
    parser.add_argument("--ci-guard", action="store_true", help="see the module docstring")
    parser.add_argument(
        "--async-handlers",
        action="store_true",
        help="PostgreSQL: plain vs `async def` no-op handlers, and async handlers awaiting "
        "50 ms, drained by the same default worker (first --jobs size)",
    )
    parser.add_argument(
        "--otel",
        action="store_true",
        help="PostgreSQL: the default worker untraced vs with the OpenTelemetry SDK (every "
        "attempt a span): under opentelemetry-instrument with no exporter, and set up with "
        "a batch span processor and a metric reader whose exporters drop everything "
        "(bench/otel_noop), first --jobs size",
    )
    parser.add_argument(
        "--keyed",
        action="store_true",
        help="PostgreSQL: jobs without a key vs a concurrency key on every job (1,000 keys, "
        "without and with a limit that is not reached), first --jobs size",
    )
    parser.add_argument(
        "--database",
        default=PG_DATABASE,
        help="name of the bench database (dropped and re-created; default %(default)s) — "
        "another name keeps two runs on one server apart",
    )
    args = parser.parse_args()
    worker_args = shlex.split(args.worker_args)
    print(f"jobdesk: {describe_worker(worker_args)}", flush=True)
    server = os.environ.get("JOBDESK_BENCH_POSTGRES_URL", DEFAULT_PG_SERVER)
    if args.ci_guard:
        sys.exit(ci_guard(server, worker_args, args.database))
    if args.async_handlers:
        async_handlers(server, args.jobs[0], args.rounds, worker_args, args.database)
        return
    if args.otel:
        traced(server, args.jobs[0], args.rounds, worker_args, args.database)
        return
    if args.keyed:
        keyed(server, args.jobs[0], args.rounds, worker_args, args.database)
        return
    backends = [args.only] if args.only else ["postgresql", "sqlite"]
    if "postgresql" in backends:
        systems = [WORKER]
        systems += [] if args.skip_pgqueuer else [PGQUEUER]
        systems += [] if args.skip_raw else [RAW]
        systems += [BOUNCED] if args.via_pgbouncer else []
        drains = postgres_drains(server, systems, worker_args, args.database)
        by_size: dict[int, dict[str, float]] = {}
        for n in args.jobs:
            by_size[n] = summary("postgresql", n, rounds(drains, n, args.rounds))
        if len(by_size) > 1:
            smallest, largest = min(by_size), max(by_size)
            small, large = by_size[smallest], by_size[largest]
            line = (
                f"postgresql jobdesk at a {largest:,} backlog: "
                f"{large[WORKER] / small[WORKER]:.0%} of its {smallest:,} rate"
            )
            if RAW in large:
                # The sizes run minutes apart: how the raw loop's rate moved in between
                # tells a busier machine from a larger backlog.
                line += f" (raw loop: {large[RAW] / small[RAW]:.0%})"
            print(line, flush=True)
    if "sqlite" in backends:
        with tempfile.TemporaryDirectory() as tmp:
            url = fresh_sqlite(Path(tmp))
            # DEFERRED: the progress polls only read, so on SQLite they never queue for
            # the write lock the worker is using.
            engine = make_engine(url, settings=Settings(), sqlite_begin="DEFERRED")
            for n in args.jobs:
                reset_and_fill(engine, n)
                got = run_worker(url, engine, n, worker_args)
                print(
                    f"sqlite     {n:>7} jobs  jobdesk worker: {got.rate:>8,.0f} jobs/s "
                    f"({got.cpu_us:,.0f} µs CPU/job{slots([got])})",
                    flush=True,
                )
            engine.dispose()


if __name__ == "__main__":
    main()
