"""Webhook delivery benchmark: signed `webhook.deliver` jobs per second through a real
`jobdesk worker --async-concurrency 32` against a local receiver.

Measured per run:

(a) end to end: N jobs enqueued up front, one worker process whose event loop runs 32
    deliveries at once; each delivery is the full path — claim, endpoint lookup,
    breaker + rate-limit checks in the database, SSRF check, Standard Webhooks signing,
    HTTP POST, delivery-log row, effects-ledger row, completion. Deliveries/s = N /
    (time from the worker's first start to its last completion).
(b) the HTTP ceiling: the same signed POSTs from a plain `httpx.AsyncClient` (one
    client, a pool of 32 connections) with 32 requests in flight, no queue at all.

The two alternate, `--rounds` times (default 3), so load from elsewhere on the machine
hits them alike; the medians follow, and the end-to-end rate as a share of the HTTP
ceiling — the median of each round's share, and the share of the medians.

The backlog is vacuumed and analysed before the drain (PostgreSQL), as in
bench/throughput.py. The receiver is a threaded Python HTTP/1.1 server verifying every
signature; on a 2-core machine it shares the CPU with the worker and the database, so
both figures are lower bounds.

    .venv/bin/python bench/webhooks.py [--jobs 2000] [--concurrency 32] [--rounds 3]
                                       [--only postgresql|sqlite]

PostgreSQL: JOBDESK_BENCH_POSTGRES_URL, default a fresh database `jobdesk_bench_webhooks`
on postgresql+psycopg://root@127.0.0.1:5432 (dropped and re-created, then migrated).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jobdesk import NewJob, enqueue_many  # noqa: E402
from jobdesk.shared.core.clock import db_now  # noqa: E402
from jobdesk.shared.core.db import make_engine  # noqa: E402
from jobdesk.shared.core.models import jobs  # noqa: E402
from jobdesk.shared.migrate import upgrade  # noqa: E402
from jobdesk.shared.webhooks.endpoints import add_endpoint  # noqa: E402
from jobdesk.shared.webhooks.signing import WebhookVerificationError, signed_headers, verify  # noqa: E402

PG_ADMIN = os.environ.get(
    "JOBDESK_BENCH_POSTGRES_URL", "postgresql+psycopg://root@127.0.0.1:5432/postgres"
)
JOBDESK = str(Path(sys.executable).parent / "jobdesk")


class Receiver:
    """Verifies signatures; counts requests; answers 204."""

    def __init__(self) -> None:
        self.secret = ""
        self.count = 0
        self.bad = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                try:
                    verify(outer.secret, {k.lower(): v for k, v in self.headers.items()}, body)
                    ok = True
                except WebhookVerificationError:
                    ok = False
                with outer.lock:
                    outer.count += 1
                    outer.bad += 0 if ok else 1
                self.send_response(204 if ok else 401)
                self.send_header("Content-Length", "0")
                self.end_headers()

        class Server(ThreadingHTTPServer):
            # 32 clients connect at once; the default listen backlog of 5 overflowed and
            # the kernel reset connections (an HTTP-only round failed on it now and then).
            request_queue_size = 128

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def database(kind: str, tmp: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp / 'bench.db'}"
    admin = sa.create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text('DROP DATABASE IF EXISTS "jobdesk_bench_webhooks" WITH (FORCE)'))
        conn.execute(sa.text('CREATE DATABASE "jobdesk_bench_webhooks"'))
    admin.dispose()
    return (
        sa.make_url(PG_ADMIN)
        .set(database="jobdesk_bench_webhooks")
        .render_as_string(hide_password=False)
    )


def end_to_end(kind: str, count: int, concurrency: int, receiver: Receiver) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        url = database(kind, Path(tmp))
        engine = make_engine(url)
        upgrade(engine)
        with engine.begin() as conn:
            receiver.secret = add_endpoint(
                conn, "bench", receiver.url, allow_private=True, now=db_now(conn)
            )
            enqueue_many(
                conn,
                [
                    NewJob("webhook.deliver", {"endpoint": "bench", "event": "e", "data": {"i": i}})
                    for i in range(count)
                ],
            )
        if kind == "postgresql":
            # As bench/throughput.py does: the drain runs on current statistics. Right
            # after a bulk insert the planner thinks the table is nearly empty and may
            # sort the whole backlog for every claim, until autovacuum's ANALYZE.
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(sa.text("VACUUM ANALYZE jobdesk_jobs"))
        env = {
            **os.environ,
            "JOBDESK_DATABASE_URL": url,
            "JOBDESK_ALLOW_PRIVATE_WEBHOOK_TARGETS": "1",
            "JOBDESK_WEBHOOK_RATE_LIMIT": "1000000/s",
            "JOBDESK_DB_POOL_SIZE": str(max(10, concurrency + 4)),
        }
        before = receiver.count
        worker = subprocess.Popen(
            [JOBDESK, "worker", "--queues", "webhooks", "--async-concurrency", str(concurrency),
             "--poll-interval", "0.05", "--log-level", "warning"],
            env=env,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                with engine.connect() as conn:
                    done = conn.execute(
                        sa.select(sa.func.count()).where(jobs.c.status == "succeeded")
                    ).scalar_one()
                    if done >= count:
                        break
                time.sleep(0.2)
            with engine.connect() as conn:
                first, last = conn.execute(
                    sa.select(sa.func.min(jobs.c.started_at), sa.func.max(jobs.c.finished_at))
                ).one()
        finally:
            worker.terminate()
            worker.wait(30)
            engine.dispose()
        assert receiver.count - before >= count, "not every job was delivered"
        return count / (last - first).total_seconds()


def http_ceiling(count: int, concurrency: int, receiver: Receiver) -> float:
    """The same signed bodies from plain `httpx.AsyncClient`s, `concurrency` in flight:
    each sender with a client of its own (one keep-alive connection each). One client
    with a pool of `concurrency` connections measured about half as fast here — the
    stronger baseline is the one used."""

    async def run() -> float:
        numbers = iter(range(count))

        async def sender() -> None:
            async with httpx.AsyncClient(trust_env=False) as client:
                for i in numbers:
                    body = f'{{"type":"e","data":{{"i":{i}}}}}'.encode()
                    headers = signed_headers([receiver.secret], f"msg_{i}", body).as_dict()
                    headers["Content-Type"] = "application/json"
                    response = await client.post(receiver.url, content=body, headers=headers)
                    assert response.status_code == 204, response

        started = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(concurrency)))
        return count / (time.perf_counter() - started)

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=["postgresql", "sqlite"])
    args = parser.parse_args()
    kinds = [k for k in ("postgresql", "sqlite") if not args.only or k == args.only]
    setup = f"{args.jobs} jobs, jobdesk worker --async-concurrency {args.concurrency}"
    plain = f"httpx.AsyncClient, {args.concurrency} in flight, no queue"
    print(f"end to end: {setup}; HTTP only: {plain}", flush=True)
    rates: dict[str, list[float]] = {kind: [] for kind in [*kinds, "http"]}
    receiver = Receiver()
    try:
        for index in range(args.rounds):
            cells = []
            for kind in kinds:
                rates[kind].append(end_to_end(kind, args.jobs, args.concurrency, receiver))
                cells.append(f"{kind} {rates[kind][-1]:6.0f}")
            rates["http"].append(http_ceiling(args.jobs, args.concurrency, receiver))
            cells.append(f"HTTP only {rates['http'][-1]:6.0f}")
            shares = "  ".join(f"{k} {rates[k][-1] / rates['http'][-1]:.0%}" for k in kinds)
            line = "   ".join(cells)
            print(f"  round {index + 1}: {line}   (share: {shares})", flush=True)
        ceiling = statistics.median(rates["http"])
        for kind in kinds:
            rate = statistics.median(rates[kind])
            shares = [e / h for e, h in zip(rates[kind], rates["http"], strict=True)]
            print(
                f"{kind:<10} end to end  : {rate:8.0f} deliveries/s median; "
                f"{statistics.median(shares):.0%} of HTTP only (median of rounds), "
                f"{rate / ceiling:.0%} (of medians)"
            )
        print(f"{'no queue':<10} HTTP only   : {ceiling:8.0f} signed POSTs/s median")
        print(f"receiver: {receiver.count} requests, {receiver.bad} with a bad signature")
    finally:
        receiver.stop()


if __name__ == "__main__":
    main()
