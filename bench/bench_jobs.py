"""Job types the worker benchmarks run (`jobdesk worker --jobs bench_jobs`, cwd bench/)."""

from __future__ import annotations

import time
from typing import Any

from jobdesk import job
from jobdesk.worker.context import JobContext


@job("bench.noop", queue="bench", max_attempts=3, timeout=30)
def noop(payload: dict[str, Any], ctx: JobContext) -> None:
    """Does nothing: measures the queue, not the work."""


@job("bench.stamp", queue="bench", max_attempts=3, timeout=30)
def stamp(payload: dict[str, Any], ctx: JobContext) -> dict[str, float]:
    """Returns the wall-clock time the handler started (latency benchmark)."""
    return {"t": time.time()}
