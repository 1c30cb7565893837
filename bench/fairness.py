"""Fair turns and the claim's cost with keys, on PostgreSQL, each beside a baseline.

    .venv/bin/python bench/fairness.py [--big 200000] [--small 100]
                                       [--backlog 1000000] [--keys 10000] [--claims 2000]

1. Turns: `--big` jobs of one concurrency key, a worker (`jobdesk worker`, default
   options) draining them, then `--small` jobs of another key. Printed: how many claims
   after the small key's enqueue its last job started — the bound is its fair share,
   2 * small * 2 active keys — and the same with no keys at all (plain FIFO: the small
   jobs wait for the rest of the big backlog).
2. Claim cost: `--backlog` waiting jobs over `--keys` keys (job i has key `t{i % keys}`),
   then `--claims` claims of 10 jobs each, every claim followed by the completion of what
   it took, one transaction each (as a worker does), timed from Python: p50/p95/max of
   each, for jobs without a key (baseline), keys without a limit, and keys limited to 5
   (then 5 jobs per key are queued and the rest wait for a slot); then the time of the
   leader's refill pass over that backlog (`SlotRefill`, one a second; median of 5).

Uses fresh databases `jobdesk_bench_fairness` on JOBDESK_BENCH_POSTGRES_URL (default
postgresql+psycopg://root@127.0.0.1:5432).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from pathlib import Path

import bench_jobs  # noqa: F401 - registers the bench job types (queue `bench`)
import sqlalchemy as sa
from throughput import DEFAULT_PG_SERVER, HERE, JOBDESK, fresh_postgres, worker_env

from jobdesk import NewJob, enqueue_many
from jobdesk.shared.core import transitions
from jobdesk.shared.core.claim import claim
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.db import make_engine
from jobdesk.shared.core.driver.base import Completion
from jobdesk.shared.core.models import jobs
from jobdesk.shared.flow.concurrency import REFILL_KEYS_PER_PASS, SlotRefill
from jobdesk.shared.settings import Settings

DATABASE = "jobdesk_bench_fairness"
FILL_BATCH = 5000
#: Refill passes timed after the claims (the leader runs one a second).
REFILL_PASSES = 5


def fill(engine: sa.Engine, count: int, job_type: str, key: object) -> None:
    """`count` jobs; `key(i)` gives job i's concurrency key (None: no key)."""
    for start in range(0, count, FILL_BATCH):
        with engine.begin() as conn:
            enqueue_many(
                conn,
                [
                    NewJob(job_type, {"i": i}, concurrency_key=key(i))  # type: ignore[operator]
                    for i in range(start, min(start + FILL_BATCH, count))
                ],
            )


def vacuum(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        conn.execute(sa.text("VACUUM ANALYZE jobdesk_jobs, jobdesk_concurrency_keys"))


def turns(server: str, big: int, small: int, keyed: bool) -> int:
    """Claims between the small key's enqueue and its last job's start."""
    url = fresh_postgres(server, DATABASE)
    engine = make_engine(url, settings=Settings())
    fill(engine, big, "bench.noop", (lambda i: "big") if keyed else (lambda i: None))
    vacuum(engine)
    proc = subprocess.Popen(
        [str(JOBDESK), "worker", "--jobs", "bench_jobs", "--log-level", "warning"],
        cwd=HERE,
        env=worker_env(url),
    )
    try:
        # Let the worker get going on the big backlog first.
        while _count(engine, jobs.c.status == "succeeded") < min(10_000, big // 4):
            time.sleep(0.05)
        with engine.begin() as conn:
            enqueued_at = db_now(conn)
        fill(engine, small, "bench.noop", (lambda i: "small") if keyed else (lambda i: None))
        small_ids = _small_ids(engine, small)
        deadline = time.monotonic() + 600
        while _count(engine, jobs.c.id.in_(small_ids), jobs.c.status == "succeeded") < small:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the small key's jobs did not finish")
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(30)
    with engine.connect() as conn:
        last_small = conn.execute(
            sa.select(sa.func.max(jobs.c.started_at)).where(jobs.c.id.in_(small_ids))
        ).scalar_one()
        claims = conn.execute(
            sa.select(sa.func.count()).where(
                jobs.c.started_at > enqueued_at, jobs.c.started_at <= last_small
            )
        ).scalar_one()
    engine.dispose()
    return int(claims)


def _count(engine: sa.Engine, *where: sa.ColumnElement[bool]) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).where(*where)).scalar_one())


def _small_ids(engine: sa.Engine, small: int) -> list[int]:
    with engine.connect() as conn:
        return list(conn.scalars(sa.select(jobs.c.id).order_by(jobs.c.id.desc()).limit(small)))


def claim_cost(server: str, backlog: int, keys: int, claims: int, kind: str) -> str:
    url = fresh_postgres(server, DATABASE)
    engine = make_engine(url, settings=Settings())
    job_type, key = {
        "no key": ("bench.noop", lambda i: None),
        "keys, no limit": ("bench.noop", lambda i: f"t{i % keys}"),
        "keys, limit 5": ("bench.limited5", lambda i: f"t{i % keys}"),
    }[kind]
    started = time.monotonic()
    fill(engine, backlog, job_type, key)
    filled = time.monotonic() - started
    vacuum(engine)
    claim_ms, complete_ms = [], []
    for _ in range(claims):
        t0 = time.perf_counter()
        with engine.begin() as conn:
            held = claim(conn, worker_id="bench", limit=10, queues=["bench"])
        t1 = time.perf_counter()
        with engine.begin() as conn:
            now = db_now(conn)
            transitions.complete_many(conn, [Completion(j) for j in held], now=now)
        t2 = time.perf_counter()
        assert len(held) == 10, f"claimed {len(held)}"
        claim_ms.append((t1 - t0) * 1000)
        complete_ms.append((t2 - t1) * 1000)
    refill_ms, refill = [], SlotRefill()
    for _ in range(REFILL_PASSES):
        t0 = time.perf_counter()
        with engine.begin() as conn:
            refill.run(conn)
        refill_ms.append((time.perf_counter() - t0) * 1000)
    engine.dispose()
    return (
        f"  {kind:<15} claim p50 {_p(claim_ms, 50):.2f} p95 {_p(claim_ms, 95):.2f} "
        f"max {max(claim_ms):.2f} ms; completion p50 {_p(complete_ms, 50):.2f} "
        f"p95 {_p(complete_ms, 95):.2f} ms; a refill pass ({REFILL_KEYS_PER_PASS:,} keys) "
        f"{statistics.median(refill_ms):.1f} ms (backlog filled in {filled:.0f} s)"
    )


def _p(values: list[float], pct: int) -> float:
    return statistics.quantiles(values, n=100)[pct - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big", type=int, default=200_000)
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--backlog", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--claims", type=int, default=2000)
    parser.add_argument("--skip-turns", action="store_true")
    parser.add_argument("--skip-claims", action="store_true")
    args = parser.parse_args()
    server = os.environ.get("JOBDESK_BENCH_POSTGRES_URL", DEFAULT_PG_SERVER)
    if not args.skip_turns:
        bound = 2 * args.small * 2
        print(f"turns: {args.big:,} jobs of one key, then {args.small} of another", flush=True)
        for keyed in (True, False):
            claims = turns(server, args.big, args.small, keyed)
            label = "with keys" if keyed else "no keys (FIFO)"
            verdict = "within" if claims <= bound else "OVER"
            print(
                f"  {label:<15} the small key's last job started {claims:,} claims after "
                f"its enqueue ({verdict} the fair share {bound})",
                flush=True,
            )
    if not args.skip_claims:
        print(
            f"claims of 10 at {args.backlog:,} waiting jobs over {args.keys:,} keys "
            f"({args.claims} claims, each then completed)",
            flush=True,
        )
        for kind in ("no key", "keys, no limit", "keys, limit 5"):
            print(claim_cost(server, args.backlog, args.keys, args.claims, kind), flush=True)


if __name__ == "__main__":
    os.chdir(Path(__file__).resolve().parent)
    main()
