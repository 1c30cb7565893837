"""R24 done-when: a schedule with every=2 on two worker processes for 20 s, the leader
SIGKILLed halfway, enqueues one job per slot and none twice."""

from __future__ import annotations

import signal
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.leader import LEADER, current_lease
from jobdesk.shared.core.models import jobs
from tests.worker.procs import Workers, wait_for
from tests.worker.test_worker_process import worker_id

SCHEDULES = "tests.worker.jobmods.schedules"


def slot_keys(engine: sa.Engine, job_type: str) -> list[str]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                sa.select(jobs.c.idempotency_key).where(jobs.c.job_type == job_type)
            ).scalars()
        )


def slot_of(key: str) -> datetime:
    """`schedule:<name>:<slot>` (names have no colon) → the slot."""
    stamp = key.split(":", 2)[2]
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


@pytest.mark.slow
def test_one_job_per_slot_across_a_killed_leader(engine: sa.Engine, procs: Workers) -> None:
    a = procs.start("--jobs", SCHEDULES)
    b = procs.start("--jobs", SCHEDULES)
    ids = {worker_id(a): a, worker_id(b): b}

    def holder() -> str | None:
        with engine.connect() as conn:
            lease = current_lease(conn, LEADER)
        return lease.holder if lease else None

    leader_id = wait_for(lambda: holder() if holder() in ids else None, 15)
    time.sleep(10)
    leader = ids[leader_id]
    leader.signal(signal.SIGKILL)
    leader.proc.wait(5)
    survivor = next(worker for wid, worker in ids.items() if wid != leader_id)
    wait_for(lambda: holder() == worker_id(survivor), 15)
    time.sleep(10)
    assert survivor.stop() == 0

    every = slot_keys(engine, "t.every_slot")
    latest = slot_keys(engine, "t.latest_slot")
    for keys in (every, latest):
        assert keys, survivor.log()
        doubled = [key for key, n in Counter(keys).items() if n > 1]
        assert doubled == []
    slots = sorted(slot_of(key) for key in every)
    # catch_up: not one 2-second slot between the first and the last is missing, the
    # leader's death included (the new leader fired the ones it missed).
    expected = [slots[0] + timedelta(seconds=2 * n) for n in range(len(slots))]
    assert slots == expected
    assert slots[-1] - slots[0] >= timedelta(seconds=14)
    # Without catch_up the slots are unique and none was fired twice; gaps are allowed.
    assert len(set(latest)) == len(latest) >= 5
