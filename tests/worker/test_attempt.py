"""`Attempt` and `ctx.cancelled` (`CancelEvent`) without a database: the lazily built
context is one per attempt, and cancellation reaches whoever waits on it."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.claim import ClaimedJob
from jobdesk.shared.settings import Settings
from jobdesk.worker.context import JobContext
from jobdesk.worker.executor import Attempt, CancelEvent, Kind, make_attempt
from jobdesk.worker.registry import Registry, job

NOW = datetime(2030, 1, 1, tzinfo=UTC)
ENGINE = sa.create_engine("sqlite://")


def handler(payload: dict[str, Any], ctx: JobContext) -> None:
    """Never run here."""


def attempt(timeout: float | None = None) -> Attempt:
    registry = Registry()
    job("t.unit", timeout=30, target=registry)(handler)
    job_type = registry.get("t.unit")
    assert job_type is not None
    claimed = ClaimedJob(7, "t.unit", "default", {}, 2, 5, 5, "k", None, timeout, 1, NOW, NOW, "w")
    return make_attempt(claimed, job_type, ENGINE, Settings())


def test_cancel_event_wait_set_clear() -> None:
    event = CancelEvent()
    assert isinstance(event, threading.Event)
    assert not event.is_set()
    assert event.wait(0.01) is False
    threading.Timer(0.05, event.set).start()
    started = time.monotonic()
    assert event.wait(5) is True
    assert time.monotonic() - started < 2
    event.clear()
    assert not event.is_set()
    event.set()
    assert event.wait(0) is True


def test_context_is_built_once_with_the_attempts_facts() -> None:
    item = attempt(timeout=2.5)
    assert item.timeout == 2.5
    item.begin()
    ctx = item.ctx
    assert ctx is item.ctx
    assert (ctx.job_id, ctx.attempt, ctx.max_attempts, ctx.idempotency_key) == (7, 2, 5, "k")
    assert ctx.worker_id == "w"
    assert ctx.engine is ENGINE
    assert ctx.deadline == item.deadline


def test_releasing_before_start_cancels_the_context_the_handler_later_sees() -> None:
    item = attempt()
    assert item.release()
    assert item.outcome is not None
    assert item.outcome.kind is Kind.RELEASED
    assert item.ctx.cancelled.is_set()
    assert not item.fence()  # settled once: later outcomes are ignored


def test_concurrent_first_use_builds_one_context() -> None:
    item = attempt()
    seen: list[JobContext] = []
    barrier = threading.Barrier(8)

    def grab() -> None:
        barrier.wait()
        seen.append(item.ctx)

    threads = [threading.Thread(target=grab) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(ctx) for ctx in seen}) == 1
