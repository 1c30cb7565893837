"""A real worker publishes the defaults its `@job` declarations set, and a process that
never imported the job module enqueues with them (the test process and `jobdesk
enqueue`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from jobdesk import enqueue
from jobdesk.shared.core.job_types import TypeDefaults, known_types
from jobdesk.shared.core.models import jobs, workers
from jobdesk.shared.core.published_types import (
    list_published,
    publish_defaults,
    published_defaults,
)
from tests import zygote
from tests.worker.procs import JOBDESK, REPO, Workers, job, wait_for

pytestmark = pytest.mark.slow

MODULE = "tests.worker.jobmods.typedefaults"
DECLARED = TypeDefaults(queue="slow", priority=2, max_attempts=9, timeout_seconds=7.0)


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    published_defaults.clear()
    yield
    published_defaults.clear()


def options_of(engine: sa.Engine, job_id: int) -> tuple[str, int, int, float | None]:
    row = job(engine, job_id)
    return (row.queue, row.priority, row.max_attempts, row.timeout_seconds)


def cli_enqueue(db_url: str, job_type: str) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBDESK_")}
    result = zygote.run(
        [str(JOBDESK), "enqueue", job_type, "{}"],
        cwd=REPO,
        env=env | {"JOBDESK_DATABASE_URL": db_url},
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    return int(result.stdout.strip())


def test_enqueue_uses_what_the_worker_declared(
    engine: sa.Engine, db_url: str, procs: Workers
) -> None:
    assert "t.defaults" not in known_types()
    assert MODULE not in sys.modules
    # An older worker version declared the type differently; the newest start wins.
    with engine.begin() as conn:
        publish_defaults(
            conn,
            {"t.defaults": TypeDefaults("default", 5, 3, None)},
            worker_id="old-worker",
            now=datetime.now(UTC),
        )
    worker = procs.start("--jobs", MODULE, "--queues", "slow")
    with engine.connect() as conn:
        worker_id = conn.execute(sa.select(workers.c.id)).scalar_one()
        published = {row.job_type: row for row in list_published(conn)}
    assert published["t.defaults"].defaults == DECLARED
    assert published["t.defaults"].published_by == worker_id
    assert "t.effect" in published  # every type the worker registered
    assert "job_type_republished" in worker.log()
    assert "old-worker" in worker.log()

    with engine.begin() as conn:
        job_id = enqueue(conn, "t.defaults", {})
    assert options_of(engine, job_id) == ("slow", 2, 9, 7.0)
    # It is in the queue the worker serves, so it runs.
    wait_for(lambda: job(engine, job_id).status == "succeeded", 20)

    from_cli = cli_enqueue(db_url, "t.defaults")
    assert options_of(engine, from_cli) == ("slow", 2, 9, 7.0)
    with engine.begin() as conn:
        explicit = enqueue(conn, "t.defaults", {}, queue="other", max_attempts=1, timeout=2)
    assert options_of(engine, explicit) == ("other", 2, 1, 2.0)

    assert worker.stop() == 0
    # The publication outlives the worker: jobs enqueued while no worker runs still
    # get the declared defaults.
    with engine.begin() as conn:
        later = enqueue(conn, "t.defaults", {})
    assert options_of(engine, later)[:3] == ("slow", 2, 9)
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar_one() == 4
