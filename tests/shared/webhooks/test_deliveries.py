"""The delivery log's deferred writes: a batch of deliveries, each with or without its
effect, lands in one go and follows the effects ledger's rules row by row."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.claim import ClaimedJob, claim
from jobdesk.shared.core.driver_sql import run_writes
from jobdesk.shared.core.effects import reserve_effect
from jobdesk.shared.core.models import effects
from jobdesk.shared.webhooks.deliveries import delivery_writer, list_deliveries, record_delivery
from tests.factories import make_job

NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)
#: Quotes, a backslash, braces and text outside ASCII arrive as they were sent.
ODD_TEXT = "busy \"now\" \\ {a,b} ünï 🚀 'x'"


def running(engine: sa.Engine, count: int) -> list[ClaimedJob]:
    with engine.begin() as conn:
        for _ in range(count):
            make_job(conn, next_run_at=NOW - timedelta(seconds=1))
        return claim(conn, worker_id="w", limit=count, now=NOW, lease_seconds=30)


def fields(job: ClaimedJob, **changes: Any) -> dict[str, Any]:
    return {
        "job_id": job.id,
        "attempt": job.attempt,
        "endpoint": "crm",
        "webhook_id": f"msg_{job.id}",
        "url": "https://crm.example/hook",
        "outcome": "delivered",
        "now": NOW,
        "status_code": 200,
        "latency_ms": 12.5,
        "response_excerpt": "ok",
        **changes,
    }


def ledger(engine: sa.Engine) -> dict[str, tuple[str, int | None, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(effects.c.key, effects.c.state, effects.c.job_id, effects.c.detail)
        )
        return {row.key: (row.state, row.job_id, row.detail) for row in rows}


def test_one_batch_follows_the_ledger_rules_for_every_row(engine: sa.Engine) -> None:
    owner, other, fresh, late, plain, twice = running(engine, 6)
    with engine.begin() as conn:
        assert reserve_effect(conn, "hook:owned", owner.ref, now=NOW).mine
        assert reserve_effect(conn, "hook:other", other.ref, now=NOW).mine
    writes = [
        # Its own reservation becomes done, with the detail.
        delivery_writer(
            engine, effect=("hook:owned", {"id": 1}), lease_token=owner.lease_token, **fields(owner)
        ),
        # Another attempt's reservation is left to that attempt.
        delivery_writer(
            engine, effect=("hook:other", {"id": 2}), lease_token=late.lease_token, **fields(late)
        ),
        # A key nobody reserved is recorded done.
        delivery_writer(
            engine, effect=("hook:fresh", {"id": 3}), lease_token=fresh.lease_token, **fields(fresh)
        ),
        # A failed delivery: its log row only.
        delivery_writer(engine, **fields(plain, outcome="retry", status_code=503, error=ODD_TEXT)),
        # The same key twice in one batch: recorded once, never an error.
        delivery_writer(
            engine, effect=("hook:twice", {"id": 4}), lease_token=twice.lease_token, **fields(twice)
        ),
        delivery_writer(
            engine,
            effect=("hook:twice", {"id": 5}),
            lease_token=twice.lease_token,
            **fields(twice, attempt=2),
        ),
    ]
    with engine.begin() as conn:
        run_writes(conn, writes)
    found = ledger(engine)
    assert found["hook:owned"] == ("done", owner.id, {"id": 1})
    assert found["hook:other"][:2] == ("reserved", other.id)
    assert found["hook:fresh"] == ("done", fresh.id, {"id": 3})
    assert found["hook:twice"][:2] == ("done", twice.id)
    assert len(found) == 4
    with engine.connect() as conn:
        [failed] = list_deliveries(conn, plain.id)
        assert len(list_deliveries(conn, twice.id)) == 2
        assert all(len(list_deliveries(conn, job.id)) == 1 for job in (owner, late, fresh))
    assert (failed["outcome"], failed["status_code"], failed["error"]) == ("retry", 503, ODD_TEXT)
    assert failed["at"] == NOW
    assert failed["latency_ms"] == 12.5


def test_a_done_effect_is_not_overwritten(engine: sa.Engine) -> None:
    first, second = running(engine, 2)
    with engine.begin() as conn:
        record_delivery(conn, effect=("hook:1", {"by": "first"}), **fields(first))
    with engine.begin() as conn:
        run_writes(
            conn,
            [
                delivery_writer(
                    engine,
                    effect=("hook:1", {"by": "second"}),
                    lease_token=second.lease_token,
                    **fields(second),
                )
            ],
        )
    assert ledger(engine)["hook:1"] == ("done", first.id, {"by": "first"})
