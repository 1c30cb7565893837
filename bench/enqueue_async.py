"""Async enqueue benchmark: `enqueue_async` in an app's `AsyncSession` transaction beside
the same job inserted by hand, in the same run.

Each committed transaction inserts an app row (`bench_users`, through the session) and
one job, as a sign-up endpoint does, on `postgresql+asyncpg`:

- `enqueue_async`: `await enqueue_async(session, "email.send", …, idempotency_key=…)`;
- raw asyncpg insert, same tx: the documented plain-SQL job INSERT and the `pg_notify`
  enqueue sends, as one statement, on the session's own asyncpg connection (the target:
  enqueue_async's p50 within +0.2 ms of this);
- session.execute insert: that same statement through `session.execute` — what any
  statement costs through SQLAlchemy's asyncpg adapter, so the enqueue's own cost and
  the adapter's can be told apart;
- raw asyncpg, no SQLAlchemy: both rows on a bare asyncpg connection.

Rounds alternate between the sides so machine noise hits all of them alike.

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

# The documented plain-SQL job insert, and the wake-up Jobdesk sends, in one statement
# (as enqueue does: one round trip).
JOB_INSERT = """
WITH ins AS (
    INSERT INTO jobdesk_jobs (job_type, queue, payload, idempotency_key)
    VALUES ($1, $2, CAST($3 AS jsonb), $4)
    ON CONFLICT (idempotency_key) WHERE retried_from_id IS NULL AND idempotency_key IS NOT NULL
    DO NOTHING RETURNING id
), wake AS (SELECT pg_notify('jobdesk_jobs', $2) AS n)
SELECT ins.id FROM ins, wake
"""
JOB_INSERT_SA = sa.text(
    JOB_INSERT.replace("$1", ":t").replace("$2", ":q").replace("$3", ":p").replace("$4", ":k")
)
APP_INSERT = sa.text("INSERT INTO bench_users (email) VALUES (:email)")


ENQUEUE = "enqueue_async"
RAW_IN_SESSION = "raw asyncpg insert, same tx"
SA_IN_SESSION = "session.execute insert"


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

    async def raw_in_session(n: int) -> None:
        async with session_factory() as session, session.begin():
            await session.execute(APP_INSERT, {"email": f"u{n}@example.com"})
            connection = await session.connection()
            driver = (await connection.get_raw_connection()).driver_connection
            assert driver is not None
            await driver.fetchval(
                JOB_INSERT, "email.send", "email", json.dumps(payload(n)), f"raw:{n}"
            )

    async def statement_in_session(n: int) -> None:
        async with session_factory() as session, session.begin():
            await session.execute(APP_INSERT, {"email": f"u{n}@example.com"})
            await session.execute(
                JOB_INSERT_SA,
                {"t": "email.send", "q": "email", "p": json.dumps(payload(n)), "k": f"sa:{n}"},
            )

    async def raw_asyncpg(n: int) -> None:
        async with raw.transaction():
            await raw.execute("INSERT INTO bench_users (email) VALUES ($1)", f"u{n}@example.com")
            await raw.fetchval(
                JOB_INSERT, "email.send", "email", json.dumps(payload(n)), f"solo:{n}"
            )

    sides: dict[str, Callable[[int], Awaitable[None]]] = {
        ENQUEUE: jobdesk,
        RAW_IN_SESSION: raw_in_session,
        SA_IN_SESSION: statement_in_session,
        "raw asyncpg, no SQLAlchemy": raw_asyncpg,
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
    print(f"{'side (app row + one job, commit)':34} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
    for name, samples in results.items():
        print(
            f"{name:34} {percentile(samples, 0.5):8.3f} {percentile(samples, 0.99):8.3f} "
            f"{statistics.fmean(samples):8.3f}"
        )
    ours = percentile(results[ENQUEUE], 0.5)
    for other in (RAW_IN_SESSION, SA_IN_SESSION):
        theirs = percentile(results[other], 0.5)
        print(f"p50 difference, enqueue_async - ({other}): {ours - theirs:+.3f} ms")


if __name__ == "__main__":
    main()
