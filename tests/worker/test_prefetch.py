"""`SlotPool` prefetch without a database: how many claimed jobs may wait for a slot,
and that waiting jobs go back rather than sit behind slow handlers."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.claim import ClaimedJob
from jobdesk.shared.settings import Settings
from jobdesk.worker.context import JobContext
from jobdesk.worker.executor import Attempt, Kind, Outcome, make_attempt
from jobdesk.worker.pool import PREFETCH_MAX, PREFETCH_WINDOW_SECONDS, STALL_SECONDS, SlotPool
from jobdesk.worker.registry import Registry, job
from tests.worker.procs import wait_for

NOW = datetime(2030, 1, 1, tzinfo=UTC)
ENGINE = sa.create_engine("sqlite://")


def handler(payload: dict[str, Any], ctx: JobContext) -> None:
    """Never run here: the pool's `run` stands in for the executor."""


REGISTRY = Registry()
job("t.unit", timeout=30, target=REGISTRY)(handler)


def attempts(first_id: int, count: int) -> list[Attempt]:
    job_type = REGISTRY.get("t.unit")
    assert job_type is not None
    return [
        make_attempt(
            ClaimedJob(i, "t.unit", "default", {}, 1, 5, 5, None, None, None, 1, NOW, NOW, "w"),
            job_type,
            ENGINE,
            Settings(),
        )
        for i in range(first_id, first_id + count)
    ]


class Handlers:
    """The pool's `run`: settles each attempt as succeeded after `duration` seconds (as
    measured, not slept); attempts whose id is in `blocked` wait for `release` first."""

    def __init__(self, duration: float) -> None:
        self.duration = duration
        self.ran: list[int] = []
        self.blocked: set[int] = set()
        self.release = threading.Event()

    def __call__(self, attempt: Attempt) -> None:
        self.ran.append(attempt.job.id)
        if attempt.job.id in self.blocked:
            self.release.wait(10)
        attempt.settle(Outcome(attempt.job, Kind.SUCCEEDED, duration=self.duration))


@pytest.fixture
def make_pool() -> Iterator[Any]:
    pools: list[tuple[SlotPool, Handlers]] = []

    def make(slots: int, duration: float) -> tuple[SlotPool, Handlers]:
        handlers = Handlers(duration)
        pool = SlotPool("all", slots, run=handlers, on_timeout=lambda a: None, on_free=lambda: None)
        pools.append((pool, handlers))
        return pool, handlers

    yield make
    for pool, handlers in pools:
        handlers.release.set()
        pool.stop()


def run_all(pool: SlotPool, batch: list[Attempt]) -> None:
    pool.submit(batch)
    wait_for(lambda: pool.busy == 0, 5, interval=0.005)


def test_no_prefetch_until_attempts_were_timed_then_quick_handlers_get_a_bounded_line(
    make_pool: Any,
) -> None:
    pool, _ = make_pool(slots=2, duration=0.0001)
    assert (pool.prefetch(), pool.free()) == (0, 2)
    run_all(pool, attempts(1, 2))
    assert pool.prefetch() == PREFETCH_MAX
    assert pool.free() == 2 + PREFETCH_MAX


def test_the_line_holds_what_the_slots_start_within_the_window(make_pool: Any) -> None:
    pool, _ = make_pool(slots=4, duration=0.01)
    run_all(pool, attempts(1, 4))
    assert pool.prefetch() == int(4 * PREFETCH_WINDOW_SECONDS / 0.01)  # 20 jobs, 50 ms


def test_slow_handlers_get_no_prefetch(make_pool: Any) -> None:
    pool, _ = make_pool(slots=10, duration=1.0)
    run_all(pool, attempts(1, 3))
    assert (pool.prefetch(), pool.free()) == (0, 10)


def test_jobs_waiting_behind_stalled_slots_are_handed_back_newest_first(make_pool: Any) -> None:
    pool, handlers = make_pool(slots=1, duration=0.0001)
    run_all(pool, attempts(1, 1))
    slow, *waiting = attempts(10, 6)
    handlers.blocked.add(slow.job.id)
    pool.submit([slow, *waiting])
    wait_for(lambda: pool.running_count == 1, 5, interval=0.005)
    assert pool.take_excess() == []  # a slot started a job just now: all may wait
    later = time.monotonic() + STALL_SECONDS + 0.01
    assert pool.prefetch(later) == 0
    assert [a.job.id for a in pool.take_excess(later)] == [15, 14, 13, 12, 11]
    assert pool.busy == 1
    time.sleep(STALL_SECONDS + 0.02)
    assert pool.free() == 0  # claims nothing more while the slot stays stalled
    handlers.release.set()
    wait_for(lambda: pool.busy == 0, 5, interval=0.005)
    assert handlers.ran == [1, 10]


def test_a_wobbling_average_keeps_up_to_twice_the_allowance(make_pool: Any) -> None:
    pool, handlers = make_pool(slots=1, duration=0.005)
    run_all(pool, attempts(1, 1))
    allowance = pool.prefetch()
    assert allowance == 10
    slow, *waiting = attempts(10, 1 + 2 * allowance + 3)
    handlers.blocked.add(slow.job.id)
    pool.submit([slow, *waiting])
    wait_for(lambda: pool.running_count == 1, 5, interval=0.005)
    assert len(pool.take_excess()) == 3
    assert pool.busy == 1 + 2 * allowance


def test_an_attempt_settled_while_it_waited_never_runs(make_pool: Any) -> None:
    pool, handlers = make_pool(slots=1, duration=0.0001)
    slow, fenced, after = attempts(1, 3)
    handlers.blocked.add(slow.job.id)
    pool.submit([slow, fenced, after])
    wait_for(lambda: pool.running_count == 1, 5, interval=0.005)
    assert fenced.fence()  # the heartbeat lost its lease while it waited
    handlers.release.set()
    wait_for(lambda: pool.busy == 0, 5, interval=0.005)
    assert handlers.ran == [1, 3]
    assert not fenced.begin()


def test_shutdown_takes_every_waiting_attempt_and_leaves_the_running_one(
    make_pool: Any,
) -> None:
    pool, handlers = make_pool(slots=1, duration=0.0001)
    slow, *waiting = attempts(1, 4)
    handlers.blocked.add(slow.job.id)
    pool.submit([slow, *waiting])
    wait_for(lambda: pool.running_count == 1, 5, interval=0.005)
    assert pool.take_waiting() == waiting
    assert (pool.busy, pool.running_count) == (1, 1)
    handlers.release.set()
    wait_for(lambda: pool.busy == 0, 5, interval=0.005)
    assert handlers.ran == [1]


def test_a_job_cancelled_while_it_waits_for_a_slot_ends_cancelled_unstarted() -> None:
    (attempt,) = attempts(900, 1)
    assert attempt.request_cancel(grace=10)
    assert attempt.ctx.cancelled.is_set()
    assert attempt.begin()
    assert attempt.cancel_unstarted()
    assert attempt.outcome is not None
    assert attempt.outcome.kind is Kind.CANCELLED
    assert "before it started" in (attempt.outcome.error or "")
    # The handler's own outcome, had it run anyway, could not overwrite it.
    assert not attempt.settle(Outcome(attempt.job, Kind.SUCCEEDED, duration=0.1))
