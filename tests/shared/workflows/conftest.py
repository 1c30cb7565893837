"""A registry of small job types for the workflow tests, and helpers to run them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.models import jobs, workers
from jobdesk.worker.context import JobContext
from jobdesk.worker.registry import Registry, job


def now() -> datetime:
    return datetime.now(UTC)


class Seen:
    """What the callbacks saw, in the order they ran."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, int, Any]] = []

    def add(self, kind: str, job_id: int, what: Any) -> None:
        self.runs.append((kind, job_id, what))

    def kinds(self) -> list[str]:
        return [kind for kind, _, _ in self.runs]


@pytest.fixture
def seen() -> Seen:
    return Seen()


@pytest.fixture
def reg(seen: Seen) -> Registry:
    reg = Registry()

    @job("wf.child", target=reg, max_attempts=1)
    def child(payload: dict[str, Any], ctx: JobContext) -> Any:
        if payload.get("fail"):
            raise RuntimeError(f"child {payload['n']} failed")
        seen.add("child", ctx.job_id, payload["n"])
        return {"n": payload["n"] * 10}

    @job("wf.done", target=reg, max_attempts=1)
    def done(payload: dict[str, Any], ctx: JobContext) -> None:
        batch = ctx.batch
        assert batch is not None
        results = [r.result for r in batch.all_results()]
        seen.add(payload["kind"], ctx.job_id, (batch.id, dict(batch.counts), results))

    @job("wf.step", target=reg, max_attempts=1)
    def step(payload: dict[str, Any], ctx: JobContext) -> str:
        if payload.get("fail"):
            raise RuntimeError(f"step {payload['name']} failed")
        seen.add("step", ctx.job_id, payload["name"])
        return str(payload["name"])

    return reg


def declare_worker(conn: sa.Connection, reg: Registry) -> None:
    """A worker row that runs the registry's types (triage retries need one)."""
    conn.execute(
        sa.insert(workers).values(
            id="w-1",
            host="test",
            pid=1,
            queues=None,
            job_types={name: {} for name in reg.names()},
            concurrency=1,
            version="test",
        )
    )


def status(conn: sa.Connection, job_id: int) -> str:
    return str(conn.execute(sa.select(jobs.c.status).where(jobs.c.id == job_id)).scalar_one())
