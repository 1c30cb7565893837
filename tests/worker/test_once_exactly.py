"""Done-when of the effects promise: 1,000 jobs applying an effect in the same database
through `ctx.once(key, fn(conn))`, three real `jobdesk worker` processes, one SIGKILLed
every second and restarted — every key applied exactly once, every job succeeded."""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest
import sqlalchemy as sa

from jobdesk import NewJob, enqueue_many
from jobdesk.shared.core.models import job_attempts
from tests.worker.jobmods.same_db import applied, metadata
from tests.worker.procs import Worker, Workers, all_done, statuses

pytestmark = pytest.mark.slow

JOBS = 1000
KILL_EVERY = 1.0
MODULE = "tests.worker.jobmods.same_db"


def _applied(engine: sa.Engine) -> Counter[str]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(applied.c.key, sa.func.count()).group_by(applied.c.key))
        return Counter({str(row[0]): int(row[1]) for row in rows})


def _lost_attempts(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count()).where(job_attempts.c.outcome == "lost")
            ).scalar_one()
        )


def test_every_key_is_applied_exactly_once_while_workers_are_killed(
    engine: sa.Engine, procs: Workers
) -> None:
    metadata.drop_all(engine)
    metadata.create_all(engine)
    rng = random.Random(23)
    with engine.begin() as conn:
        enqueue_many(
            conn,
            [NewJob("t.once_db", {"key": f"k{i}", "ms": rng.randint(0, 30)}) for i in range(JOBS)],
        )

    def start() -> Worker:
        return procs.start("--jobs", MODULE, "--concurrency", "4", wait_ready=False)

    fleet = [start() for _ in range(3)]
    kills = 0
    deadline = time.monotonic() + 240
    next_kill = time.monotonic() + KILL_EVERY
    while not all_done(engine, JOBS):
        assert time.monotonic() < deadline, f"not drained: {statuses(engine)}; {kills} kills"
        time.sleep(0.1)
        if time.monotonic() < next_kill:
            continue
        next_kill += KILL_EVERY
        victim = rng.randrange(len(fleet))
        fleet[victim].kill()
        kills += 1
        fleet[victim] = start()
    for worker in fleet:
        worker.stop()

    counts = _applied(engine)
    doubled = {key: n for key, n in counts.items() if n > 1}
    assert not doubled, f"applied more than once: {dict(list(doubled.items())[:10])}"
    assert len(counts) == JOBS
    assert statuses(engine) == {"succeeded": JOBS}
    # The kills really hit running jobs (each one rescued by the reaper).
    assert kills >= 5
    assert _lost_attempts(engine) > 0
