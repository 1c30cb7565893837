"""Job types of the per-key concurrency process test (`--jobs tests.worker.jobmods.keyed`):
a handler that notes when it starts and ends (wall clock, one file per worker process
under `KEYED_TRACE_DIR`), so the test sees what really ran at once."""

from __future__ import annotations

import os
import random
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from jobdesk import job
from jobdesk.shared.core.retry import ExponentialBackoff
from jobdesk.worker.context import JobContext

#: A rescued job runs again within a second, not after the default backoff.
SOON = ExponentialBackoff(base=timedelta(seconds=0.2), cap=timedelta(seconds=1))
LIMIT = 3


def _note(event: str, payload: dict[str, Any], ctx: JobContext) -> None:
    trace = Path(os.environ["KEYED_TRACE_DIR"]) / f"{os.getpid()}.log"
    with trace.open("a") as out:
        out.write(f"{event} {ctx.job_id} {payload['key']} {time.time():.6f}\n")


@job("t.keyed", queue="keyed", max_attempts=5, backoff=SOON, concurrency=LIMIT)
def keyed(payload: dict[str, Any], ctx: JobContext) -> None:
    _note("start", payload, ctx)
    time.sleep(random.uniform(0.02, 0.08))
    _note("end", payload, ctx)
