"""Per-key ordering (R13): G1 with real workers, G3 policy, G4 after a SIGKILL."""

from __future__ import annotations

import itertools
import random
import signal
from collections import defaultdict
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import NewJob, PermanentError, enqueue, enqueue_many
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.retry import Schedule
from jobdesk.worker.context import JobContext
from jobdesk.worker.registry import Registry, job
from jobdesk.worker.testing import drain
from tests.worker.procs import Workers, all_done, attempts_of, effect_rows, wait_for
from tests.worker.procs import job as job_row


@pytest.mark.slow
def test_groups_never_overlap_and_keep_their_order(engine: sa.Engine, procs: Workers) -> None:
    rng = random.Random(7)
    specs = [
        NewJob(
            "t.grouped",
            {"group": f"g{i % 10}", "max_sleep": 0.02},
            group_key=f"g{i % 10}",
            priority=rng.choice([3, 5, 5, 7]),
        )
        for i in range(200)
    ]
    with engine.begin() as conn:
        ids = enqueue_many(conn, specs)
    priority = {job_id: spec.priority for job_id, spec in zip(ids, specs, strict=True)}
    procs.start("--concurrency", "6")
    wait_for(lambda: all_done(engine, 200), 60, interval=0.2)
    runs: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for row in effect_rows(engine, "run:"):
        runs[row.detail["group"]].append((row.detail["start"], row.detail["end"], row.job_id))
    assert sum(len(v) for v in runs.values()) == 200
    for group, items in runs.items():
        items.sort()
        for (_, end, _), (start, _, _) in itertools.pairwise(items):
            assert end <= start, f"group {group}: runs overlap"
        started = [job_id for _, _, job_id in items]
        assert started == sorted(started, key=lambda j: (priority[j], j)), group


def test_retrying_head_blocks_its_group_dead_head_does_not(engine: sa.Engine) -> None:
    reg = Registry()
    ran: list[str] = []

    @job("g.head", target=reg, backoff=Schedule.of_seconds([60], jitter=0), max_attempts=2)
    def head(payload: dict[str, Any], ctx: JobContext) -> None:
        ran.append("head")
        raise ConnectionError("downstream unavailable")

    @job("g.next", target=reg)
    def nxt(payload: dict[str, Any], ctx: JobContext) -> None:
        ran.append(payload["name"])

    with engine.begin() as conn:
        head_id = enqueue(conn, "g.head", {}, group_key="user:1")
        blocked = enqueue(conn, "g.next", {"name": "blocked"}, group_key="user:1")
        enqueue(conn, "g.next", {"name": "other-group"}, group_key="user:2")
        enqueue(conn, "g.next", {"name": "ungrouped"})
    drain(engine, registry=reg)
    assert sorted(ran) == ["head", "other-group", "ungrouped"]
    assert job_row(engine, blocked).status == "queued"
    # the retry is due in 60 s: the group waits for it (strict order), then the head dies
    with engine.connect() as conn:
        later = db_now(conn) + timedelta(seconds=61)
    drain(engine, registry=reg, now=later)
    assert job_row(engine, head_id).status == "dead"
    assert job_row(engine, blocked).status == "succeeded"
    assert ran[-2:] == ["head", "blocked"]


def test_permanent_failure_unblocks_the_group_at_once(engine: sa.Engine) -> None:
    reg = Registry()

    @job("g.bad", target=reg)
    def bad(payload: dict[str, Any], ctx: JobContext) -> None:
        raise PermanentError("invoice deleted")

    @job("g.ok", target=reg)
    def ok(payload: dict[str, Any], ctx: JobContext) -> None:
        return None

    with engine.begin() as conn:
        enqueue(conn, "g.bad", {}, group_key="invoice:9")
        follower = enqueue(conn, "g.ok", {}, group_key="invoice:9")
    result = drain(engine, registry=reg)
    assert result.by_status == {"dead": 1, "succeeded": 1}
    assert job_row(engine, follower).status == "succeeded"


@pytest.mark.slow
def test_group_unblocks_only_when_the_reaper_recovers_the_head(
    engine: sa.Engine, procs: Workers
) -> None:
    with engine.begin() as conn:
        head = enqueue(conn, "t.sleep", {"seconds": 60, "first_only": True}, group_key="acct:1")
        follower = enqueue(conn, "t.effect", {"key": "follower"}, group_key="acct:1")
    first = procs.start()
    wait_for(lambda: effect_rows(engine, f"run:{head}:1"), 10)
    first.signal(signal.SIGKILL)
    first.proc.wait(5)
    procs.start()
    wait_for(lambda: job_row(engine, follower).status == "succeeded", 20)
    lost, retried = attempts_of(engine, head)
    assert (lost.outcome, retried.outcome) == ("lost", "succeeded")
    follower_row = job_row(engine, follower)
    assert follower_row.started_at >= retried.finished_at
    assert follower_row.attempts == 1
