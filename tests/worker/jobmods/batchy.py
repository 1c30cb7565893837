"""Job types of the batch and dependency process tests (`--jobs tests.worker.jobmods.batchy`):
children that take a little time, and callbacks that return what `ctx.batch` showed them."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from jobdesk import job
from jobdesk.shared.core.retry import ExponentialBackoff
from jobdesk.worker.context import JobContext

#: A rescued child runs again within a second, not after the default backoff.
SOON = ExponentialBackoff(base=timedelta(seconds=0.2), cap=timedelta(seconds=1))


@job("t.batch_child", queue="batches", max_attempts=5, backoff=SOON)
def child(payload: dict[str, Any], ctx: JobContext) -> dict[str, int]:
    time.sleep(payload.get("sleep", 0.05))
    return {"n": payload["n"]}


@job("t.batch_callback", queue="batches", max_attempts=5, backoff=SOON)
def callback(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    batch = ctx.batch
    assert batch is not None
    results = [r.result["n"] for r in batch.all_results() if r.result is not None]
    return {"batch": batch.id, "counts": batch.counts, "results": sorted(results)}


@job("t.chain_step", queue="batches", max_attempts=5)
def chain_step(payload: dict[str, Any], ctx: JobContext) -> float:
    time.sleep(payload.get("sleep", 0.01))
    return time.time()
