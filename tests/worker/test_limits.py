"""Rate limits shared across worker processes; a breaker driven by a job type (R15)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import NewJob, Snooze, enqueue, enqueue_many
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.limits.breakers import (
    CLOSED,
    HALF_OPEN,
    OPEN,
    allow_attempt,
    breaker_state,
    record_failure,
    record_success,
)
from jobdesk.worker.context import JobContext
from jobdesk.worker.registry import Registry
from jobdesk.worker.registry import job as job_decorator
from jobdesk.worker.testing import drain
from tests.worker.procs import Workers, all_done, effect_rows, job, wait_for


@pytest.mark.slow
def test_rate_limit_is_shared_by_two_worker_processes(engine: sa.Engine, procs: Workers) -> None:
    procs.start("--concurrency", "4")
    procs.start("--concurrency", "4")
    # Runs of 0.1 s: the two processes' 8 slots could run 80 jobs/s, four times the limit,
    # and a process whose slots are busy prefetches only a few jobs — no-op runs let the
    # first process to claim take the whole backlog and snooze through it alone.
    with engine.begin() as conn:
        enqueue_many(conn, [NewJob("t.limited", {"seconds": 0.1}) for _ in range(60)])
    wait_for(lambda: all_done(engine, 60), 30, interval=0.2)
    rows = effect_rows(engine, "run:")
    assert len(rows) == 60
    # Token bucket (20/s, burst 20): at most burst + rate * w + P * B tokens are taken in
    # any window of w seconds (P = 2 processes, B = 1 token per refill at this rate). Each
    # token was taken between its acquire's call and return, so every run whose interval
    # lies inside [a, b] took its token inside [a, b]; handler start times would also
    # count how long a loaded host took to schedule the handler after the token.
    spans = [(row.detail["asked"], row.detail["granted"]) for row in rows]
    for a in {asked for asked, _ in spans}:
        for b in {granted for _, granted in spans if granted >= a}:
            inside = sum(1 for asked, granted in spans if a <= asked and granted <= b)
            assert inside <= 20 + 20 * (b - a) + 2, (a, b, inside)
    times = sorted(row.detail["at"] for row in rows)
    assert times[-1] - times[0] >= (60 - 20) / 20 * 0.9
    assert len({row.detail["pid"] for row in rows}) == 2


def test_breaker_opens_probes_and_closes_through_a_job_type(
    engine: sa.Engine, tmp_path: Path
) -> None:
    reg = Registry()
    down = tmp_path / "down"
    down.touch()
    key = "webhook:crm"

    @job_decorator("b.call", target=reg, max_attempts=20)
    def call(payload: dict[str, Any], ctx: JobContext) -> str:
        now = payload_now[0]
        with ctx.engine.begin() as conn:
            allowed, wait = allow_attempt(conn, key, now)
        if not allowed:
            raise Snooze(wait, f"circuit open for {key}")
        if down.exists():
            with ctx.engine.begin() as conn:
                record_failure(conn, key, now, "HTTP 503", threshold=3)
            raise ConnectionError("HTTP 503")
        with ctx.engine.begin() as conn:
            record_success(conn, key, now)
        return "delivered"

    with engine.begin() as conn:
        ids = [enqueue(conn, "b.call", {"n": i}) for i in range(5)]
    with engine.connect() as conn:
        t0 = db_now(conn)
    payload_now = [t0]
    result = drain(engine, registry=reg, now=t0)
    # three failures open the breaker; the other two wait without burning attempts
    assert result.by_kind == {"failed": 3, "snoozed": 2}
    with engine.connect() as conn:
        assert breaker_state(conn, key, t0).state == OPEN
    snoozed = [i for i in ids if job(engine, i).status == "queued"]
    assert all(job(engine, i).attempts == 0 for i in snoozed)
    # after the cooldown exactly one probe goes; it fails and re-opens the breaker
    later = t0 + timedelta(seconds=31)
    payload_now[0] = later
    probe = drain(engine, registry=reg, now=later, max_jobs=2)
    assert probe.by_kind == {"failed": 1, "snoozed": 1}
    with engine.connect() as conn:
        view = breaker_state(conn, key, later)
    assert (view.state, view.retry_at) == (OPEN, later + timedelta(seconds=60))
    # the destination recovers: the next probe closes it and everything flows
    down.unlink()
    recovered = later + timedelta(seconds=61)
    payload_now[0] = recovered
    drain(engine, registry=reg, now=recovered + timedelta(minutes=10))
    with engine.connect() as conn:
        assert breaker_state(conn, key, recovered).state == CLOSED
    assert all(job(engine, i).status == "succeeded" for i in ids)
    assert HALF_OPEN != CLOSED
