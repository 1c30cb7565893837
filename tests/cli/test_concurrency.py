"""`jobdesk enqueue --concurrency-key` and `jobdesk jobs show` telling why a job waits for
a slot — both databases, through the command line's own entry point."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.models import jobs
from jobdesk.worker.context import JobContext
from jobdesk.worker.registry import Registry, job
from tests.cli.test_batches import run

_reg = Registry()


@job("t.tenant_sync", concurrency=1, target=_reg)
def tenant_sync(payload: dict[str, Any], ctx: JobContext) -> None:
    return None


def test_enqueue_with_a_key_and_show_why_the_second_waits(engine: sa.Engine, db_url: str) -> None:
    ids = []
    for n in range(2):
        code, out = run(
            db_url,
            "enqueue",
            "t.tenant_sync",
            json.dumps({"n": n}),
            "--concurrency-key",
            "tenant:9",
        )
        assert code == 0, out
        ids.append(int(out))
    with engine.connect() as conn:
        rows = dict(
            conn.execute(
                sa.select(jobs.c.id, jobs.c.status).where(jobs.c.concurrency_key == "tenant:9")
            ).all()
        )
    assert rows == {ids[0]: "queued", ids[1]: "waiting"}
    code, out = run(db_url, "jobs", "show", str(ids[1]))
    assert code == 0, out
    assert "waiting for a slot: 1 of 1 slots of tenant:9 busy (1 waiting)" in out
    code, out = run(db_url, "jobs", "show", str(ids[1]), "--json")
    assert json.loads(out)["waiting_reason"].startswith("waiting for a slot: 1 of 1 slots")
    code, out = run(db_url, "enqueue", "t.tenant_sync", "{}", "--concurrency-key", "x" * 201)
    assert code == 1
    assert "concurrency_key" in out
