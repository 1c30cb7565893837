"""Enqueue benchmark: Jobdesk's `enqueue` / `enqueue_many` beside raw DB-API baselines.

Measured in the same run, on PostgreSQL and SQLite:

(a) single enqueue inside the caller's transaction, which also inserts an app row
    (`bench_users`): latency p50/p99 per committed transaction. Baseline: a raw psycopg /
    sqlite3 connection doing the same transaction by hand (app row + the documented
    plain-SQL job INSERT ... RETURNING id, and `pg_notify` on PostgreSQL, as enqueue does).
    Measured for a type registered in the process (`email.send`), for one only a
    worker published (`bench.published`, defaults from the per-process cache), and with
    one `secrets=` value (sealed with Fernet, stored beside the job).
(b) bulk `enqueue_many`: jobs/s for small payloads in batches, one transaction per batch.
    Baselines: one raw multi-row `INSERT ... VALUES (...), (...)` per batch (the issue's
    target: >= 50 % of it) and raw psycopg / sqlite3 `executemany` of the same rows
    (json.dumps included, no RETURNING — the raw side does not even get the ids back).

Rounds alternate between Jobdesk and the baseline so machine noise hits both alike.

    .venv/bin/python bench/enqueue.py [--jobs 50000] [--batch 5000] [--singles 2000]
                                      [--only postgresql|sqlite]

PostgreSQL: JOBDESK_BENCH_POSTGRES_URL, default a fresh database `jobdesk_bench` on
postgresql+psycopg://root@127.0.0.1:5432 (dropped and re-created, then migrated).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy as sa
from cryptography.fernet import Fernet

from jobdesk import NewJob, enqueue, enqueue_many
from jobdesk.shared.core.db import make_engine
from jobdesk.shared.core.job_types import TypeDefaults, known_types
from jobdesk.shared.core.published_types import publish_defaults
from jobdesk.shared.migrate import upgrade
from jobdesk.shared.settings import Settings

DEFAULT_PG_SERVER = "postgresql+psycopg://root@127.0.0.1:5432"
PG_DATABASE = "jobdesk_bench"
ROUNDS = 3
#: Not registered in this process: its defaults come from `jobdesk_job_types`.
PUBLISHED_TYPE = "bench.published"

APP_TABLE_PG = "CREATE TABLE IF NOT EXISTS bench_users (id BIGSERIAL PRIMARY KEY, email TEXT)"
APP_TABLE_SQLITE = "CREATE TABLE IF NOT EXISTS bench_users (id INTEGER PRIMARY KEY, email TEXT)"
JOB_INSERT_PG = (
    "INSERT INTO jobdesk_jobs (job_type, queue, payload, idempotency_key) VALUES (%s, %s, %s, %s) "
    "ON CONFLICT (idempotency_key) WHERE retried_from_id IS NULL AND idempotency_key IS NOT NULL"
    " DO NOTHING RETURNING id"
)
JOB_INSERT_SQLITE = JOB_INSERT_PG.replace("%s", "?")
BULK_INSERT_PG = (
    "INSERT INTO jobdesk_jobs (job_type, queue, payload, priority, max_attempts) "
    "VALUES (%s, %s, %s, %s, %s)"
)
BULK_INSERT_SQLITE = BULK_INSERT_PG.replace("%s", "?")


def pg_url() -> str:
    url = os.environ.get("JOBDESK_BENCH_POSTGRES_URL")
    if url:
        return url
    admin = sa.create_engine(f"{DEFAULT_PG_SERVER}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{PG_DATABASE}" WITH (FORCE)'))
        conn.execute(sa.text(f'CREATE DATABASE "{PG_DATABASE}"'))
    admin.dispose()
    return f"{DEFAULT_PG_SERVER}/{PG_DATABASE}"


def libpq_dsn(url: str) -> str:
    return sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def payload(n: int) -> dict[str, Any]:
    return {"to_user_id": n, "template": "welcome", "event_id": f"signup:{n}"}


class Backend:
    """What differs between the two databases: how to open a raw connection and reset."""

    def __init__(self, name: str, url: str) -> None:
        self.name = name
        self.url = url
        self.engine = make_engine(url, settings=Settings(), pool_size=2)
        upgrade(self.engine)
        with self.engine.begin() as conn:
            conn.exec_driver_sql(APP_TABLE_PG if self.postgresql else APP_TABLE_SQLITE)

    @property
    def postgresql(self) -> bool:
        return self.name == "postgresql"

    def reset(self) -> None:
        with self.engine.begin() as conn:
            if self.postgresql:
                conn.exec_driver_sql(
                    "TRUNCATE jobdesk_jobs, jobdesk_job_attempts, bench_users CASCADE"
                )
            else:
                conn.exec_driver_sql("DELETE FROM jobdesk_job_attempts")
                conn.exec_driver_sql("DELETE FROM jobdesk_jobs")
                conn.exec_driver_sql("DELETE FROM bench_users")

    def raw_connection(self) -> Any:
        if self.postgresql:
            return psycopg.connect(libpq_dsn(self.url))
        path = sa.make_url(self.url).database
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=10000")
        return conn


# -- (a) single enqueue in the caller's transaction ---------------------------------------


def single_jobdesk(
    backend: Backend,
    start: int,
    count: int,
    job_type: str = "email.send",
    *,
    with_secret: bool = False,
) -> list[float]:
    users = sa.table("bench_users", sa.column("email"))
    samples = []
    with backend.engine.connect() as conn:
        for n in range(start, start + count):
            began = time.perf_counter()
            secrets = {"api_token": f"tok-{n:08d}-0123456789abcdef"} if with_secret else None
            with conn.begin():
                conn.execute(users.insert().values(email=f"user{n}@example.com"))
                enqueue(conn, job_type, payload(n), idempotency_key=f"welcome:{n}", secrets=secrets)
            samples.append(time.perf_counter() - began)
    return samples


def single_raw(backend: Backend, start: int, count: int) -> list[float]:
    samples = []
    raw = backend.raw_connection()
    try:
        for n in range(start, start + count):
            began = time.perf_counter()
            body = json.dumps(payload(n))
            if backend.postgresql:
                with raw.transaction():
                    raw.execute(
                        "INSERT INTO bench_users (email) VALUES (%s)", (f"user{n}@example.com",)
                    )
                    raw.execute(JOB_INSERT_PG, ("email.send", "email", body, f"welcome:{n}"))
                    raw.execute("SELECT pg_notify('jobdesk_jobs', 'email')")
            else:
                raw.execute("BEGIN IMMEDIATE")
                raw.execute("INSERT INTO bench_users (email) VALUES (?)", (f"user{n}@example.com",))
                raw.execute(
                    JOB_INSERT_SQLITE, ("email.send", "email", body, f"welcome:{n}")
                ).fetchall()
                raw.execute("COMMIT")
            samples.append(time.perf_counter() - began)
    finally:
        raw.close()
    return samples


# -- (b) bulk enqueue_many ------------------------------------------------------------------


def bulk_jobdesk(backend: Backend, start: int, total: int, batch: int) -> float:
    began = time.perf_counter()
    for offset in range(start, start + total, batch):
        specs = [NewJob("bench.noop", payload(n)) for n in range(offset, offset + batch)]
        with backend.engine.begin() as conn:
            ids = enqueue_many(conn, specs)
        assert len(ids) == batch
    return time.perf_counter() - began


def bulk_raw(backend: Backend, start: int, total: int, batch: int) -> float:
    raw = backend.raw_connection()
    try:
        began = time.perf_counter()
        for offset in range(start, start + total, batch):
            rows = [
                ("bench.noop", "default", json.dumps(payload(n)), 5, 5)
                for n in range(offset, offset + batch)
            ]
            if backend.postgresql:
                with raw.transaction(), raw.cursor() as cur:
                    cur.executemany(BULK_INSERT_PG, rows)
            else:
                raw.execute("BEGIN IMMEDIATE")
                raw.executemany(BULK_INSERT_SQLITE, rows)
                raw.execute("COMMIT")
        return time.perf_counter() - began
    finally:
        raw.close()


def bulk_raw_values(backend: Backend, start: int, total: int, batch: int) -> float:
    """One multi-row `INSERT ... VALUES (...), (...), ...` per batch (SQLite: per chunk under
    its 32,766 bound-variable cap), one transaction per batch: the issue's baseline."""
    raw = backend.raw_connection()
    mark = "%s" if backend.postgresql else "?"
    chunk = batch if backend.postgresql else 32_766 // 5

    def insert(rows: list[tuple[object, ...]]) -> None:
        statement = (
            "INSERT INTO jobdesk_jobs (job_type, queue, payload, priority, max_attempts) VALUES "
            + ", ".join(["(" + ", ".join([mark] * 5) + ")"] * len(rows))
        )
        raw.execute(statement, [value for values in rows for value in values])

    try:
        began = time.perf_counter()
        for offset in range(start, start + total, batch):
            rows: list[tuple[object, ...]] = [
                ("bench.noop", "default", json.dumps(payload(n)), 5, 5)
                for n in range(offset, offset + batch)
            ]
            if backend.postgresql:
                with raw.transaction():
                    insert(rows)
            else:
                raw.execute("BEGIN IMMEDIATE")
                for first in range(0, len(rows), chunk):
                    insert(rows[first : first + chunk])
                raw.execute("COMMIT")
        return time.perf_counter() - began
    finally:
        raw.close()


def best_of(measure: Callable[[int], float], rounds: int) -> float:
    return min(measure(r) for r in range(rounds))


def run_backend(backend: Backend, args: argparse.Namespace) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    # (a) alternate rounds; the first 10 % of each round warm caches and are dropped.
    mine: list[float] = []
    published: list[float] = []
    sealed: list[float] = []
    raw: list[float] = []
    backend.reset()
    assert PUBLISHED_TYPE not in known_types()
    with backend.engine.begin() as conn:
        publish_defaults(
            conn,
            {PUBLISHED_TYPE: TypeDefaults("email", 3, 6, 20.0)},
            worker_id="bench",
            now=datetime.now(UTC),
        )
    per_round = args.singles // ROUNDS
    warm = per_round // 10
    for r in range(ROUNDS):
        base = r * per_round * 4
        mine += single_jobdesk(backend, base, per_round)[warm:]
        published += single_jobdesk(backend, base + per_round, per_round, PUBLISHED_TYPE)[warm:]
        sealed += single_jobdesk(backend, base + 2 * per_round, per_round, with_secret=True)[warm:]
        raw += single_raw(backend, base + 3 * per_round, per_round)[warm:]
    for label, samples in (
        ("jobdesk enqueue", mine),
        ("jobdesk enqueue, published type", published),
        ("jobdesk enqueue with secrets=", sealed),
        ("raw baseline", raw),
    ):
        rows.append(
            (
                backend.name,
                f"single txn ({label})",
                f"{statistics.median(samples) * 1000:.3f} ms",
                f"{percentile(samples, 0.99) * 1000:.3f} ms",
                "",
            )
        )
    added = statistics.median(mine) - statistics.median(raw)
    rows.append((backend.name, "single: added p50", f"{added * 1000:+.3f} ms", "", ""))
    added = statistics.median(published) - statistics.median(raw)
    rows.append(
        (backend.name, "single, published type: added p50", f"{added * 1000:+.3f} ms", "", "")
    )
    added = statistics.median(sealed) - statistics.median(mine)
    rows.append(
        (backend.name, "secrets= vs plain enqueue: added p50", f"{added * 1000:+.3f} ms", "", "")
    )

    # (b) bulk: alternate, keep the best round of each.
    total, batch = args.jobs, args.batch
    mine_best = raw_best = values_best = float("inf")
    counter = 10_000_000
    for _ in range(ROUNDS):
        backend.reset()
        mine_best = min(mine_best, bulk_jobdesk(backend, counter, total, batch))
        counter += total
        backend.reset()
        raw_best = min(raw_best, bulk_raw(backend, counter, total, batch))
        counter += total
        backend.reset()
        values_best = min(values_best, bulk_raw_values(backend, counter, total, batch))
        counter += total
    mine_rate, raw_rate = total / mine_best, total / raw_best
    values_rate = total / values_best
    rows.append(
        (
            backend.name,
            f"bulk enqueue_many ({total:,} jobs, batch {batch:,})",
            f"{mine_rate:,.0f} jobs/s",
            "",
            f"{mine_rate / values_rate:.0%} of VALUES, {mine_rate / raw_rate:.0%} of executemany",
        )
    )
    rows.append(
        (backend.name, "bulk raw multi-row VALUES", f"{values_rate:,.0f} jobs/s", "", "baseline")
    )
    rows.append((backend.name, "bulk raw executemany", f"{raw_rate:,.0f} jobs/s", "", "baseline"))
    return rows


def print_table(rows: list[tuple[str, ...]]) -> None:
    header = ("database", "measurement", "p50 / rate", "p99", "vs baseline")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    print(line)
    print("-" * len(line))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50_000, help="jobs per bulk round")
    parser.add_argument("--batch", type=int, default=5_000, help="jobs per enqueue_many call")
    parser.add_argument("--singles", type=int, default=3_000, help="single enqueues in all")
    parser.add_argument("--only", choices=("postgresql", "sqlite"))
    args = parser.parse_args()
    # The `secrets=` rounds seal with a key of this run's own.
    os.environ.setdefault("JOBDESK_ENCRYPTION_KEYS", Fernet.generate_key().decode())
    rows: list[tuple[str, ...]] = []
    if args.only != "sqlite":
        backend = Backend("postgresql", pg_url())
        rows += run_backend(backend, args)
        backend.engine.dispose()
    if args.only != "postgresql":
        with tempfile.TemporaryDirectory() as tmp:
            backend = Backend("sqlite", f"sqlite:///{Path(tmp) / 'bench.db'}")
            rows += run_backend(backend, args)
            backend.engine.dispose()
    print_table(rows)


if __name__ == "__main__":
    main()
