"""Async enqueue benchmark: `enqueue_async` in an app's `AsyncSession` transaction beside
a raw asyncpg connection doing the same transaction by hand, in the same run.

Each committed transaction inserts an app row (`bench_users`) and one job, as a sign-up
endpoint does. Jobdesk side: `AsyncSession` on `postgresql+asyncpg`, `session.execute`
of the app row, `await enqueue_async(session, "email.send", …, idempotency_key=…)`,
commit. Baseline: one raw asyncpg connection, `async with conn.transaction()`, the app
row, the documented plain-SQL job INSERT … RETURNING id and the `pg_notify` enqueue sends,
commit. Also shown: the same SQLAlchemy `AsyncSession` transaction with the app row only,
so the cost of SQLAlchemy's session and of the enqueue itself can be told apart.
Rounds alternate between the sides so machine noise hits all of them alike; the figure
that matters is the p50 difference (target: within +0.2 ms of the raw transaction).

    .venv/bin/python bench/enqueue_async.py [--singles 2000] [--rounds 3]

PostgreSQL: JOBDESK_BENCH_POSTGRES_URL, default a fresh database `jobdesk_bench` on
127.0.0.1 (dropped and re-created, then migrated).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.enqueue import APP_TABLE_PG, Backend, payload, percentile, pg_url
from jobdesk import enqueue_async

JOB_INSERT = (
    "INSERT INTO jobdesk_jobs (job_type, queue, payload, idempotency_key) "
    "VALUES ($1, $2, $3::jsonb, $4) "
    "ON CONFLICT (idempotency_key) WHERE retried_from_id IS NULL AND idempotency_key IS NOT NULL"
    " DO NOTHING RETURNING id"
)
APP_INSERT = sa.text("INSERT INTO bench_users (email) VALUES (:email)")


async def timed(count: int, start: int, one: Callable[[int], Awaitable[None]]) -> list[float]:
    samples = []
    for n in range(start, start + count):
        began = time.perf_counter()
        await one(n)
        samples.append((time.perf_counter() - began) * 1000)
    return samples


async def measure(url: str, singles: int, rounds: int) -> dict[str, list[float]]:
    async_url = sa.make_url(url).set(drivername="postgresql+asyncpg")
    engine = create_async_engine(async_url, pool_size=2)
    session_factory = async_sessionmaker(engine, expire_on_commit=False)
    raw = await asyncpg.connect(
        sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    )

    async def jobdesk(n: int) -> None:
        async with session_factory() as session, session.begin():
            await session.execute(APP_INSERT, {"email": f"u{n}@example.com"})
            await enqueue_async(
                session, "email.send", payload(n), idempotency_key=f"welcome_email:user:{n}"
            )

    async def session_only(n: int) -> None:
        async with session_factory() as session, session.begin():
            await session.execute(APP_INSERT, {"email": f"u{n}@example.com"})

    async def raw_asyncpg(n: int) -> None:
        async with raw.transaction():
            await raw.execute("INSERT INTO bench_users (email) VALUES ($1)", f"u{n}@example.com")
            await raw.fetchval(
                JOB_INSERT, "email.send", "email", json.dumps(payload(n)), f"raw:{n}"
            )
            await raw.execute("SELECT pg_notify('jobdesk_jobs', 'email')")

    sides: dict[str, Callable[[int], Awaitable[None]]] = {
        "enqueue_async (AsyncSession)": jobdesk,
        "raw asyncpg transaction": raw_asyncpg,
        "AsyncSession, app row only": session_only,
    }
    results: dict[str, list[float]] = {name: [] for name in sides}
    start = 0
    for one in sides.values():  # warm-up: connections, statement caches
        await timed(50, start, one)
        start += 50
    for _ in range(rounds):
        for name, one in sides.items():
            results[name] += await timed(singles, start, one)
            start += singles
    await raw.close()
    await engine.dispose()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--singles", type=int, default=2000, help="transactions per side per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    url = pg_url()
    backend = Backend("postgresql", url)  # migrates and creates bench_users
    backend.reset()
    with backend.engine.begin() as conn:
        conn.exec_driver_sql(APP_TABLE_PG)
    results = asyncio.run(measure(url, args.singles, args.rounds))
    backend.engine.dispose()
    print(f"PostgreSQL, asyncpg; {args.rounds} rounds x {args.singles} transactions per side")
    print(f"{'side':34} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
    for name, samples in results.items():
        print(
            f"{name:34} {percentile(samples, 0.5):8.3f} {percentile(samples, 0.99):8.3f} "
            f"{statistics.fmean(samples):8.3f}"
        )
    ours = percentile(results["enqueue_async (AsyncSession)"], 0.5)
    theirs = percentile(results["raw asyncpg transaction"], 0.5)
    print(f"p50 difference, enqueue_async - raw asyncpg: {ours - theirs:+.3f} ms")


if __name__ == "__main__":
    main()
