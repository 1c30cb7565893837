"""Dashboard benchmark: page latency through HTTP on a large queue.

    .venv/bin/python bench/dashboard.py                 # PostgreSQL 1,000,000 jobs + SQLite 200,000
    .venv/bin/python bench/dashboard.py --only sqlite --jobs 50000 --rounds 20

PostgreSQL is bulk-loaded with one `INSERT … SELECT generate_series` (100,000 dead jobs,
50,000 distinct error texts in 20 error families, four queues, six types, two attempt
rows per dead job; ids grow with time over 30 days, so queued and retrying jobs are the
newest rows, as in a live queue), SQLite the same shape with a recursive CTE. The
dashboard runs under gunicorn (the shipped gthread config) in a subprocess; an operator
logs in and each page is fetched `--rounds` times after one warm-up. The overview is
measured twice: with its 5-second count cache (the default) and recomputing every time.
The History page is timed after the leader's rollup has folded the loaded attempts in
(its duration is printed) and every minute of the last 8 days has a bucket for each of
the six queue/type pairs, the most that page ever reads.
Printed: p50/p95 per page, then the `EXPLAIN (ANALYZE, BUFFERS)` of the slowest SQL
statement those pages ran (captured by running the same shared queries in-process).

Targets (issue 5): p95 ≤ 250 ms on PostgreSQL, ≤ 500 ms on SQLite.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jobdesk.shared.core.db import make_engine  # noqa: E402
from jobdesk.shared.core.masking import fingerprint  # noqa: E402
from jobdesk.shared.history.models import history_minutes  # noqa: E402
from jobdesk.shared.history.rollup import KEEP, add_buckets, roll_up  # noqa: E402
from jobdesk.shared.migrate import upgrade  # noqa: E402
from jobdesk.shared.operator.commands.accounts import add_operator  # noqa: E402

PG_ADMIN = os.environ.get(
    "JOBDESK_BENCH_POSTGRES_URL", "postgresql+psycopg://root@127.0.0.1:5432/test"
)
PG_DB = "jobdesk_bench_dashboard"
PASSWORD = "benchmark password"
#: Error families: the number placeholder makes 2,500 distinct texts per family.
FAMILIES = [
    "ConnectTimeout: POST https://crm.example.com/hooks/users timed out after 10.0s (request {n})",
    "HTTP 503 Service Unavailable from https://billing.example.com/events (request {n})",
    "SMTP 550 5.1.1 <user{n}@example.com>: mailbox unavailable",
    "SMTP 421 4.7.0 try again later, closing connection (session {n})",
    "HTTP 410 Gone: endpoint https://partner.example.com/hook/{n} was removed",
    "PermanentError: report 'activity' has no data source for shard {n}",
    "ReadTimeout: GET https://api.example.com/users/{n} after 5.0s",
    "KeyError: 'customer_id' in payload of order {n}",
    "psycopg.errors.SerializationFailure: could not serialize access (tx {n})",
    "ValueError: invalid literal for int() with base 10: 'x{n}'",
    "ConnectionResetError: [Errno 104] Connection reset by peer (attempt {n})",
    "HTTP 429 Too Many Requests from https://crm.example.com (retry after {n}s)",
    "TimeoutError: report chunk {n} exceeded 300s",
    "ssl.SSLCertVerificationError: certificate has expired (host {n}.example.net)",
    "HTTP 400 Bad Request: field 'email' is invalid (user {n})",
    "PermanentError: account {n} was deleted",
    "OSError: [Errno 28] No space left on device (chunk {n})",
    "RuntimeError: template 'welcome' version {n} not found",
    "HTTP 502 Bad Gateway from https://crm.example.com/hooks/users (request {n})",
    "json.decoder.JSONDecodeError: Expecting value: line 1 column {n} (char 0)",
]
DISTINCT_PER_FAMILY = 2500  # 20 x 2,500 = 50,000 distinct texts
GROUPS = [
    ("email", "email.send"),
    ("webhooks", "webhook.deliver"),
    ("reports", "report.generate"),
    ("reports", "report.chunk"),
    ("default", "crm.sync"),
    ("default", "invoice.render"),
]


def _sql_list(values: list[str]) -> str:
    return "ARRAY[" + ", ".join("'" + v.replace("'", "''") + "'" for v in values) + "]"


def load_postgresql(url: str, total: int) -> None:
    templates = [f.replace("{n}", "%s") for f in FAMILIES]
    prints = [fingerprint(f.replace("{n}", "1")) or "" for f in FAMILIES]
    engine = make_engine(url)
    upgrade(engine)
    with engine.begin() as conn:
        conn.execute(sa.text("SET LOCAL statement_timeout = 0"))
        conn.execute(
            sa.text(f"""
            INSERT INTO jobdesk_jobs (job_type, queue, payload, status, priority, attempts,
                              max_attempts, next_run_at, created_at, updated_at, finished_at,
                              last_error,
                              error_fingerprint, idempotency_key, group_key)
            SELECT t.job_type, t.queue, t.payload, s.status, 5,
                   CASE WHEN s.status IN ('dead', 'failed') THEN 3
                        WHEN s.status = 'queued' THEN 0 ELSE 1 END,
                   5,
                   s.created, s.created,
                   least(s.created + interval '2 hours', now()),
                   CASE WHEN s.status IN ('succeeded', 'dead', 'cancelled')
                        THEN least(s.created + interval '2 hours', now()) END,
                   CASE WHEN s.status IN ('dead', 'failed')
                        THEN format(({_sql_list(templates)})[1 + i % 20],
                                    (i / 20) % {DISTINCT_PER_FAMILY}) END,
                   CASE WHEN s.status IN ('dead', 'failed')
                        THEN ({_sql_list(prints)})[1 + i % 20] END,
                   'key:' || i,
                   CASE WHEN i % 10 = 0 AND s.status <> 'running' THEN 'user:' || (i % 5000) END
            FROM generate_series(1, :total) AS i
            CROSS JOIN LATERAL (SELECT CASE
                WHEN i % 10 = 3 THEN 'dead'
                WHEN i > :total * 0.944 THEN 'queued'
                WHEN i > :total * 0.91 AND i % 3 = 0 THEN 'failed'
                WHEN i > :total * 0.91 AND i % 7 = 0 THEN 'running'
                WHEN i % 100 = 5 THEN 'cancelled' ELSE 'succeeded' END AS status,
                now() - make_interval(secs => (:total - i) * 2592000.0 / :total) AS created) s
            CROSS JOIN LATERAL (SELECT
                (ARRAY['email.send', 'webhook.deliver', 'report.generate', 'report.chunk',
                       'crm.sync', 'invoice.render'])[1 + (i / 3) % 6] AS job_type,
                (ARRAY['email', 'webhooks', 'reports', 'reports', 'default',
                       'default'])[1 + (i / 3) % 6] AS queue,
                jsonb_build_object('user_id', i, 'template', 'welcome', 'endpoint', 'crm',
                                   'event', 'user.created',
                                   'data', jsonb_build_object('n', i)) AS payload) t
        """),
            {"total": total},
        )
        # Running jobs need distinct group keys (one running job per key is a constraint).
        conn.execute(
            sa.text("""
            INSERT INTO jobdesk_job_attempts (job_id, attempt, worker_id, started_at,
                                      finished_at, outcome, error, error_fingerprint)
            SELECT j.id, a, 'bench:1:aa', j.finished_at - interval '10 minutes', j.finished_at,
                   'failed', j.last_error, j.error_fingerprint
            FROM jobdesk_jobs j CROSS JOIN generate_series(1, 2) AS a WHERE j.status = 'dead'
        """)
        )
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("SET statement_timeout = 0"))
        conn.execute(sa.text("VACUUM ANALYZE jobdesk_jobs"))
        conn.execute(sa.text("VACUUM ANALYZE jobdesk_job_attempts"))
    engine.dispose()


def load_sqlite(url: str, total: int) -> None:
    engine = make_engine(url)
    upgrade(engine)
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        cursor.execute("CREATE TEMP TABLE families(k INTEGER PRIMARY KEY, text TEXT, fp TEXT)")
        cursor.executemany(
            "INSERT INTO families VALUES (?, ?, ?)",
            [(k, f, fingerprint(f.replace("{n}", "1"))) for k, f in enumerate(FAMILIES)],
        )
        ts = "strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || ({expr}) || ' seconds') || '000'"
        cursor.execute(f"""
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {total}),
            s AS (SELECT i, CASE WHEN i % 10 = 3 THEN 'dead'
                    WHEN i > {total} * 0.944 THEN 'queued'
                    WHEN i > {total} * 0.91 AND i % 3 = 0 THEN 'failed'
                    WHEN i > {total} * 0.91 AND i % 7 = 0 THEN 'running'
                    WHEN i % 100 = 5 THEN 'cancelled' ELSE 'succeeded' END AS status,
                    ({total} - i) * 2592000.0 / {total} AS age, (i / 3) % 6 AS t FROM n)
            INSERT INTO jobdesk_jobs (job_type, queue, payload, status, attempts, max_attempts,
                              next_run_at, created_at, updated_at, finished_at, last_error,
                              error_fingerprint, idempotency_key, group_key)
            SELECT CASE t WHEN 0 THEN 'email.send' WHEN 1 THEN 'webhook.deliver'
                          WHEN 2 THEN 'report.generate' WHEN 3 THEN 'report.chunk'
                          WHEN 4 THEN 'crm.sync' ELSE 'invoice.render' END,
                   CASE t WHEN 0 THEN 'email' WHEN 1 THEN 'webhooks' WHEN 2 THEN 'reports'
                          WHEN 3 THEN 'reports' ELSE 'default' END,
                   json_object('user_id', i, 'template', 'welcome', 'endpoint', 'crm',
                               'event', 'user.created', 'data', json_object('n', i)),
                   status,
                   CASE WHEN status IN ('dead', 'failed') THEN 3
                        WHEN status = 'queued' THEN 0 ELSE 1 END,
                   5,
                   {ts.format(expr="age")}, {ts.format(expr="age")},
                   {ts.format(expr="max(age - 7200, 0)")},
                   CASE WHEN status IN ('succeeded', 'dead', 'cancelled')
                        THEN {ts.format(expr="max(age - 7200, 0)")} END,
                   CASE WHEN status IN ('dead', 'failed') THEN
                        replace(f.text, '{{n}}', (i / 20) % {DISTINCT_PER_FAMILY}) END,
                   CASE WHEN status IN ('dead', 'failed') THEN f.fp END,
                   'key:' || i,
                   CASE WHEN i % 10 = 0 AND status <> 'running' THEN 'user:' || (i % 5000) END
            FROM s JOIN families f ON f.k = i % 20
        """)
        cursor.execute("""
            INSERT INTO jobdesk_job_attempts (job_id, attempt, worker_id, started_at,
                                      finished_at, outcome, error, error_fingerprint)
            SELECT id, a.n, 'bench:1:aa', finished_at, finished_at, 'failed', last_error,
                   error_fingerprint
            FROM jobdesk_jobs, (SELECT 1 AS n UNION ALL SELECT 2) a WHERE status = 'dead'
        """)
        cursor.execute("COMMIT")
        cursor.execute("ANALYZE")
    finally:
        raw.close()
    engine.dispose()


def load_history(url: str) -> tuple[float, int, int]:
    """Roll the loaded attempts up as the leader would, then give every minute of the
    kept range a bucket per group; returns (rollup seconds, attempts, bucket rows)."""
    engine = make_engine(url)
    now = datetime.now(UTC)
    started = time.monotonic()
    rolled = roll_up(engine, now)
    took = time.monotonic() - started
    first = now.replace(second=0, microsecond=0) - KEEP
    rows = [
        {
            "minute": first + timedelta(minutes=m),
            "queue": queue,
            "job_type": job_type,
            "processed": 40 + (m * 7 + g) % 90,
            "failed": (m + g) % 6,
            "dead": 1 if (m + g) % 50 == 0 else 0,
            "waited": 40,
            "wait_seconds_sum": 40 * (0.2 + (m % 30) / 10),
            "wait_seconds_max": 1.0 + (m % 45),
        }
        for m in range(int(KEEP.total_seconds() // 60))
        for g, (queue, job_type) in enumerate(GROUPS)
    ]
    with engine.begin() as conn:
        # Added like the rollup adds (the rolled-up minutes just get more).
        add_buckets(conn, rows)
        buckets = conn.execute(sa.select(sa.func.count()).select_from(history_minutes)).scalar_one()
        if engine.dialect.name == "postgresql":
            conn.execute(sa.text("ANALYZE jobdesk_history_minutes"))
            conn.execute(sa.text("ANALYZE jobdesk_history_hours"))
    engine.dispose()
    return took, rolled.attempts, int(buckets)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(url: str, cache: bool = True) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {
        **os.environ,
        "JOBDESK_DASHBOARD_OVERVIEW_CACHE_SECONDS": "5" if cache else "0",
        "JOBDESK_DATABASE_URL": url,
        "JOBDESK_SECRET_KEY": secrets.token_urlsafe(48),
        "JOBDESK_DASHBOARD_BIND": f"127.0.0.1:{port}",
    }
    process = subprocess.Popen(
        [
            str(ROOT / ".venv/bin/gunicorn"),
            "-c",
            str(ROOT / "deploy/gunicorn.conf.py"),
            "--access-logfile",
            "/dev/null",
            "--chdir",
            str(ROOT),
            "dashboard:create_app()",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return process, base
        except httpx.HTTPError:
            time.sleep(0.2)
    process.terminate()
    raise RuntimeError("the dashboard did not become ready")


def logged_in_client(base: str) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=30, follow_redirects=False)
    page = client.get("/login").text
    token = re.search(r'name="csrf-token" content="([^"]+)"', page)
    assert token is not None
    response = client.post(
        "/login",
        data={"csrf_token": token.group(1), "username": "bench", "password": PASSWORD},
        headers={"Origin": base},
    )
    assert response.status_code == 303, response.text[:300]
    return client


def pages(fp: str) -> dict[str, str]:
    return {
        "overview (counts cached 5 s)": "/",
        "filtered list": "/jobs?status=dead&queue=webhooks&type=webhook.deliver",
        "error search (rare)": "/jobs?error=request+1234%29",
        "error search (common)": "/jobs?error=mailbox+unavailable",
        "dead-letter groups": "/dead",
        "one group's jobs": f"/jobs?status=dead&resolution=unresolved&fingerprint={fp}",
        "history 1 h": "/history?range=1h",
        "history 24 h": "/history",
        "history 7 d": "/history?range=7d",
        "history 7 d, one type": "/history?range=7d&type=email.send",
    }


def held_pages() -> dict[str, str]:
    return {
        "overview, held, uncached": "/",
        "held by endpoint crm": "/jobs?webhook=crm&held=endpoint",
        "held by queue reports": "/jobs?queue=reports&held=queue",
        "queued, with hold lines": "/jobs?status=queued&page_size=100",
    }


def hold(url: str) -> None:
    from jobdesk.shared.core.queues import pause_queue
    from jobdesk.shared.limits.breakers import open_breaker
    from jobdesk.shared.webhooks.endpoints import pause_endpoint

    engine = make_engine(url)
    now = datetime.now(UTC)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO jobdesk_webhook_endpoints (name, url, secret) "
                "VALUES ('crm', 'https://crm.example.com/hooks', 'whsec_YmVuY2g')"
            )
        )
        pause_endpoint(conn, "crm", actor="bench", reason="CRM maintenance", now=now)
        pause_queue(conn, "reports", actor="bench", reason="month-end close", now=now)
        open_breaker(conn, "smtp:default", now, "provider incident")
    engine.dispose()


def measure(client: httpx.Client, path: str, rounds: int) -> list[float]:
    assert client.get(path).status_code == 200, path
    timings = []
    for _ in range(rounds):
        start = time.perf_counter()
        response = client.get(path)
        timings.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, (path, response.status_code)
    return timings


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def slowest_statement(url: str, fp: str) -> tuple[float, str, Any]:
    """Run the pages' shared queries in-process and return the slowest statement."""
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.operator.filters import JobFilters
    from jobdesk.shared.operator.queries.dead_letters import (
        dead_groups,
        dead_trend,
        unresolved_dead_count,
    )
    from jobdesk.shared.operator.queries.history import HistoryFilters, read_history
    from jobdesk.shared.operator.queries.jobs import list_jobs
    from jobdesk.shared.operator.queries.stats import (
        counts_by_status_queue_type,
        oldest_queued_age_by_queue,
    )

    engine = make_engine(url, sqlite_begin="DEFERRED")
    seen: list[tuple[float, str, Any]] = []

    @sa.event.listens_for(engine, "before_cursor_execute")
    def _before(
        conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool
    ) -> None:
        conn.info["t"] = time.perf_counter()

    @sa.event.listens_for(engine, "after_cursor_execute")
    def _after(
        conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool
    ) -> None:
        seen.append(((time.perf_counter() - conn.info["t"]) * 1000, statement, params))

    with engine.connect() as conn:
        now = db_now(conn)
        for _ in range(2):
            counts_by_status_queue_type(conn)
            oldest_queued_age_by_queue(conn, now)
            dead_trend(conn, now=now)
            unresolved_dead_count(conn)
            for args in (
                {"status": "dead", "queue": "webhooks", "type": "webhook.deliver"},
                {"error": "request 1234)"},
                {"error": "mailbox unavailable"},
                {"status": "dead", "resolution": "unresolved", "fingerprint": fp},
            ):
                list_jobs(conn, JobFilters.from_args(args), now=now)
            dead_groups(conn, JobFilters(), now=now)
            for span in ("24h", "7d"):
                read_history(conn, HistoryFilters(span=span), now=now)
    engine.dispose()
    return max(seen[len(seen) // 2 :], key=lambda item: item[0])


def explain(url: str, statement: str, params: Any) -> str:
    engine = make_engine(url, sqlite_begin="DEFERRED")
    with engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        cursor = raw.cursor()
        if engine.dialect.name == "postgresql":
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, params)
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + statement, params)
        lines = [" | ".join(str(c) for c in row) for row in cursor.fetchall()]
    engine.dispose()
    return "\n".join(lines)


def run(name: str, url: str, total: int, rounds: int) -> None:
    print(f"\n== {name}: loading {total:,} jobs ==", flush=True)
    started = time.monotonic()
    (load_postgresql if name == "postgresql" else load_sqlite)(url, total)
    engine = make_engine(url)
    with engine.begin() as conn:
        add_operator(conn, "bench", PASSWORD, "operator", now=datetime.now(UTC))
        counts = dict(
            conn.execute(sa.text("SELECT status, count(*) FROM jobdesk_jobs GROUP BY status")).all()
        )
        attempts = conn.execute(sa.text("SELECT count(*) FROM jobdesk_job_attempts")).scalar_one()
    engine.dispose()
    print(f"loaded in {time.monotonic() - started:.1f}s: {counts}; {attempts:,} attempt rows")
    took, rolled, buckets = load_history(url)
    print(f"history rollup: {rolled:,} attempts in {took:.1f}s; {buckets:,} bucket rows")
    fp = fingerprint(FAMILIES[0].replace("{n}", "1")) or ""
    results = []
    for cache in (True, False):
        process, base = start_server(url, cache=cache)
        try:
            client = logged_in_client(base)
            todo = pages(fp) if cache else {"overview, counts uncached": "/"}
            for label, path in todo.items():
                results.append((label, measure(client, path, rounds)))
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
    # On-call's holds (R26): a paused queue, a paused endpoint (every loaded webhook
    # delivery goes to crm) and an open SMTP breaker, then the overview counting what
    # they hold and the lists behind its links, uncached.
    hold(url)
    process, base = start_server(url, cache=False)
    try:
        client = logged_in_client(base)
        for label, path in held_pages().items():
            results.append((label, measure(client, path, rounds)))
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    print(f"{'page':<28} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}")
    for label, timings in results:
        print(
            f"{label:<28} {statistics.median(timings):8.1f} {p95(timings):8.1f} {max(timings):8.1f}"
        )
    took, statement, params = slowest_statement(url, fp)
    print(f"\nslowest statement ({took:.1f} ms):\n{statement}\nparams: {params}\n")
    print(explain(url, statement, params))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["postgresql", "sqlite"])
    parser.add_argument("--jobs", type=int, help="jobs to load (default 1,000,000 / 200,000)")
    parser.add_argument("--rounds", type=int, default=40)

    args = parser.parse_args()
    if args.only in (None, "postgresql"):
        admin = sa.create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{PG_DB}" WITH (FORCE)'))
            conn.execute(sa.text(f'CREATE DATABASE "{PG_DB}"'))
        url = sa.make_url(PG_ADMIN).set(database=PG_DB).render_as_string(hide_password=False)
        try:
            run("postgresql", url, args.jobs or 1_000_000, args.rounds)
        finally:
            with admin.connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{PG_DB}" WITH (FORCE)'))
            admin.dispose()
    if args.only in (None, "sqlite"):
        with tempfile.TemporaryDirectory() as folder:
            run("sqlite", f"sqlite:///{folder}/bench.db", args.jobs or 200_000, args.rounds)


if __name__ == "__main__":
    main()
