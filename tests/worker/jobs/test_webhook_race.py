"""B16 / R16 for webhooks: two `webhook.deliver` jobs of the same event — twin requeues
of one dead delivery, with and without an idempotency key — running at the same moment
on two worker processes POST it ONCE; the other job says who delivered it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import enqueue
from jobdesk.shared.core.models import effects, jobs
from tests.worker.jobs.conftest import add_test_endpoint
from tests.worker.jobs.receiver import Receiver
from tests.worker.procs import Workers, all_succeeded, wait_for

ROUNDS = {"postgresql": 30, "sqlite": 8}


@pytest.mark.slow
def test_two_workers_racing_on_one_webhook_event_post_it_once(
    engine: sa.Engine, db_url: str, backend: str, receiver: Receiver,
    jobs_env: dict[str, str], tmp_path: Path,
) -> None:  # fmt: skip
    receiver.delay_seconds = 0.15  # the first POST is still in flight when the twin starts
    receiver.secrets.append(add_test_endpoint(engine, "crm", receiver.url("/hook")))
    pool = Workers(db_url, tmp_path)
    rounds = ROUNDS[backend]
    try:
        for _ in range(2):
            pool.start("--concurrency", "1", "--queues", "default", env=jobs_env)
        for n in range(rounds):
            # Even rounds carry the app's idempotency key, odd ones the key derived from
            # the chain's first job: both paths to the effects ledger are raced.
            key = f"user.created:{n}" if n % 2 == 0 else None
            twins = _dead_delivery_requeued_twice(engine, n, key)
            wait_for(lambda: all_succeeded(engine, twins), 30)  # noqa: B023 (waited for at once)
    finally:
        pool.cleanup()
    posts = Counter(receiver.ids_seen("/hook"))
    assert len(posts) == rounds
    assert set(posts.values()) == {1}, posts
    with engine.connect() as conn:
        results = [
            row.result
            for row in conn.execute(
                sa.select(jobs.c.result).where(jobs.c.retried_from_id.is_not(None))
            )
        ]
        states = Counter(conn.execute(sa.select(effects.c.state)).scalars())
    skipped = [result for result in results if result.get("skipped")]
    assert len(skipped) == rounds
    assert all(result["skipped"] == "already delivered" for result in skipped)
    assert all(result.get("delivered_by_job") for result in skipped)
    assert states == {"done": rounds}


def _dead_delivery_requeued_twice(engine: sa.Engine, n: int, key: str | None) -> list[int]:
    """An original delivery that went dead, and two requeues of it (as two operators'
    "Retry" would make them: the key copied, `retried_from_id` pointing back)."""
    payload: dict[str, Any] = {"endpoint": "crm", "event": "user.created", "data": {"n": n}}
    with engine.begin() as conn:
        original = enqueue(conn, "webhook.deliver", payload, idempotency_key=key)
        conn.execute(sa.update(jobs).where(jobs.c.id == original).values(status="dead"))
        twin = {
            "job_type": "webhook.deliver",
            "payload": payload,
            "idempotency_key": key,
            "retried_from_id": original,
        }
        return [
            conn.execute(sa.insert(jobs).values(twin).returning(jobs.c.id)).scalar_one()
            for _ in range(2)
        ]
