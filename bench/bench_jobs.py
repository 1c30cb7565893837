"""Job types the worker benchmarks run (`jobdesk worker --jobs bench_jobs`, cwd bench/)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from jobdesk import job
from jobdesk.worker.context import JobContext


@job("bench.noop", queue="bench", max_attempts=3, timeout=30)
def noop(payload: dict[str, Any], ctx: JobContext) -> None:
    """Does nothing: measures the queue, not the work."""


@job("bench.keyed_noop", queue="bench", max_attempts=3, timeout=30, concurrency=100)
def keyed_noop(payload: dict[str, Any], ctx: JobContext) -> None:
    """Does nothing, under a per-key limit of 100 (`bench/throughput.py --keyed`)."""


@job("bench.limited5", queue="bench", max_attempts=3, timeout=30, concurrency=5)
def limited5(payload: dict[str, Any], ctx: JobContext) -> None:
    """Does nothing, 5 at most per concurrency key (`bench/fairness.py`)."""


@job("bench.stamp", queue="bench", max_attempts=3, timeout=30)
def stamp(payload: dict[str, Any], ctx: JobContext) -> dict[str, float]:
    """Returns the wall-clock time the handler started (latency benchmark)."""
    return {"t": time.time()}


@job("bench.async_noop", queue="bench", max_attempts=3, timeout=30)
async def async_noop(payload: dict[str, Any], ctx: JobContext) -> None:
    """An `async def` that does nothing: the event loop's cost per job."""


@job("bench.async_wait", queue="bench", max_attempts=3, timeout=30)
async def async_wait(payload: dict[str, Any], ctx: JobContext) -> None:
    """Awaits 50 ms, like a call to a service: how many one process keeps in flight."""
    await asyncio.sleep(0.05)
