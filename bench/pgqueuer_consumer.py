"""PgQueuer 1.6's side of `bench/throughput.py`. Runs in `bench/.venv-pgqueuer` (made by
`pgqueuer_peer.py`), never in Jobdesk's environment:

    python pgqueuer_consumer.py run BATCH    # the consumer, until the queue is empty
    python pgqueuer_consumer.py fill N       # a fresh backlog

The consumer is PgQueuer's own worker loop, set up as its README shows — one asyncpg
connection, one `PgQueuer`, one async no-op entrypoint (`main`, a `pgq run` factory) —
and started the way `pgq run main --batch-size BATCH --mode drain` starts it:
`pgqueuer.run` (the CLI's supervisor) on uvloop. (1.6.0's `pgq run` itself fails before
it starts with the current typer: its --log-level parser hands a str to
`setup_fancy_logger`.) The wall-clock time of the first handler call is written to
$PGQUEUER_BENCH_STAMP: the start of the measured interval (the end is the last
`successful` row PgQueuer logs). The DSN comes from $PGDSN.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pgqueuer
import uvloop
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.domain.types import QueueExecutionMode
from pgqueuer.models import Job
from pgqueuer.queries import Queries

ENTRYPOINT = "bench.noop"
#: The same payload as Jobdesk's bench jobs (`{"i": 0}`).
PAYLOAD = b'{"i":0}'
FILL_CHUNK = 5000


@contextlib.asynccontextmanager
async def main() -> AsyncIterator[PgQueuer]:
    connection = await asyncpg.connect(os.environ["PGDSN"])
    pgq = PgQueuer(AsyncpgDriver(connection))
    stamp = Path(os.environ["PGQUEUER_BENCH_STAMP"])
    started: list[float] = []

    @pgq.entrypoint(ENTRYPOINT)
    async def noop(job: Job) -> None:
        if not started:
            started.append(time.time())
            stamp.write_text(repr(started[0]))

    try:
        yield pgq
    finally:
        await connection.close()


async def fill(count: int) -> None:
    """Empty the queue and its log, then enqueue `count` jobs (in chunks, untimed)."""
    connection = await asyncpg.connect(os.environ["PGDSN"])
    try:
        queries = Queries(AsyncpgDriver(connection))
        await queries.clear_queue()
        await queries.clear_queue_log()
        await queries.clear_statistics_log()
        left = count
        while left > 0:
            size = min(left, FILL_CHUNK)
            await queries.enqueue([ENTRYPOINT] * size, [PAYLOAD] * size, [0] * size)
            left -= size
    finally:
        await connection.close()


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("fill", "run"):
        sys.exit("usage: pgqueuer_consumer.py fill N | run BATCH")
    if sys.argv[1] == "fill":
        asyncio.run(fill(int(sys.argv[2])))
    else:
        uvloop.run(pgqueuer.run(main, batch_size=int(sys.argv[2]), mode=QueueExecutionMode.drain))
