"""Quarantine holds (`jobdesk.shared.flow.holds`), both databases: what a hold takes when
placed and what it catches later, what its release lets go, what it leaves alone, and
how bad input is refused."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import ValidationError, enqueue
from jobdesk.shared.core import transitions
from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.core.claim import ClaimedJob, claim
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.models import jobs
from jobdesk.shared.flow.holds import (
    HoldTarget,
    place_hold,
    preview_hold,
    release_expired,
    release_hold,
)
from jobdesk.shared.operator.queries.holds import quarantines
from jobdesk.worker.registry import Registry, job

_reg = Registry()


@job("holds.limited", concurrency=1, target=_reg)
def limited(payload: dict[str, Any], ctx: object) -> None:
    return None


def add(engine: sa.Engine, count: int = 1, **options: Any) -> list[int]:
    payload = options.pop("payload", {})
    with engine.begin() as conn:
        return [enqueue(conn, "holds.plain", payload, **options) for _ in range(count)]


def state(engine: sa.Engine, ids: list[int]) -> list[tuple[str, int | None]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(jobs.c.id, jobs.c.status, jobs.c.held_by).where(jobs.c.id.in_(ids))
        ).all()
    found = {row.id: (row.status, row.held_by) for row in rows}
    return [found[i] for i in ids]


def hold(engine: sa.Engine, match: str, value: str, **options: Any) -> int:
    with engine.begin() as conn:
        placed = place_hold(
            conn,
            HoldTarget.parse(match, value),
            reason=options.pop("reason", "runaway import"),
            actor="ana",
            now=db_now(conn),
            **options,
        )
    return placed.id


def release(engine: sa.Engine, hold_id: int) -> int:
    with engine.begin() as conn:
        return release_hold(conn, hold_id, actor="bo", now=db_now(conn))


def take(engine: sa.Engine) -> list[ClaimedJob]:
    with engine.begin() as conn:
        return claim(conn, worker_id="w1", limit=100)


def test_a_hold_takes_the_waiting_jobs_of_a_key_and_catches_new_ones(engine: sa.Engine) -> None:
    held_ids = add(engine, 2, concurrency_key="tenant:42")
    other = add(engine, 1, concurrency_key="tenant:7")
    with engine.connect() as conn:
        preview = preview_hold(conn, HoldTarget.parse("concurrency_key", "tenant:42"))
    assert (preview.count, preview.sample) == (2, tuple(held_ids))
    hold_id = hold(engine, "concurrency_key", "tenant:42")
    assert state(engine, held_ids) == [("waiting", hold_id)] * 2
    (late,) = add(engine, 1, concurrency_key="tenant:42")
    assert state(engine, [late]) == [("waiting", hold_id)]
    assert [j.id for j in take(engine)] == other  # the queue keeps going
    with engine.connect() as conn:
        ((listed, _),) = [(q.hold, q.capped) for q in quarantines(conn, active=True)]
    assert (listed.id, listed.held, listed.sentence()) == (
        hold_id, 3, "quarantine of tenant:42 by ana — runaway import",
    )  # fmt: skip
    assert release(engine, hold_id) == 3
    assert state(engine, [*held_ids, late]) == [("queued", None)] * 3
    with engine.connect() as conn:
        actions = conn.execute(
            sa.select(audit_log.c.action, audit_log.c.actor, audit_log.c.subject).order_by(
                audit_log.c.id
            )
        ).all()
    assert [tuple(a) for a in actions] == [
        ("hold.add", "ana", "tenant:42"), ("hold.release", "bo", "tenant:42"),
    ]  # fmt: skip


def test_group_and_payload_holds_match_numbers_and_their_spelling(engine: sa.Engine) -> None:
    grouped = add(engine, 1, group_key="orders-7")
    as_number = add(engine, 1, payload={"account_id": 42})
    as_text = add(engine, 1, payload={"account_id": "42"})
    nested = add(engine, 1, payload={"account": {"id": 42}})
    others = add(engine, 1, payload={"account_id": 420}) + add(engine, 1, group_key="orders-8")
    group_hold = hold(engine, "group_key", "orders-7")
    payload_hold = hold(engine, "payload", "account_id=42")
    nested_hold = hold(engine, "payload", "account.id=42")
    assert state(engine, grouped + as_number + as_text + nested + others) == [
        ("waiting", group_hold), ("waiting", payload_hold), ("waiting", payload_hold),
        ("waiting", nested_hold), ("queued", None), ("queued", None),
    ]  # fmt: skip
    (late,) = add(engine, 1, payload={"account_id": 42.0, "other": "x"})
    assert state(engine, [late]) == [("waiting", payload_hold)]


def test_a_held_retry_keeps_its_attempts_and_its_time(engine: sa.Engine) -> None:
    (job_id,) = add(engine, 1, concurrency_key="tenant:3")
    (running,) = take(engine)
    hold_id = hold(engine, "concurrency_key", "tenant:3")
    assert state(engine, [job_id]) == [("running", None)]  # a running job is left alone
    with engine.begin() as conn:
        now = db_now(conn)
        retry_at = now + timedelta(minutes=5)
        transitions.fail(conn, running.ref, error="boom", now=now, retry_at=retry_at)
    assert state(engine, [job_id]) == [("waiting", hold_id)]
    release(engine, hold_id)
    with engine.connect() as conn:
        row = conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).one()
    assert (row.status, row.attempts, row.next_run_at) == ("queued", 1, retry_at)


def test_release_leaves_what_another_hold_or_the_key_slots_still_stop(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        ids = [
            enqueue(conn, "holds.limited", {"account_id": 9}, concurrency_key="tenant:9")
            for _ in range(3)
        ]
    assert [s for s, _ in state(engine, ids)] == ["queued", "waiting", "waiting"]
    by_key = hold(engine, "concurrency_key", "tenant:9")
    by_payload = hold(engine, "payload", "account_id=9")
    assert state(engine, ids) == [("waiting", by_key)] * 3
    release(engine, by_key)
    assert state(engine, ids) == [("waiting", by_payload)] * 3
    release(engine, by_payload)
    assert state(engine, ids) == [("queued", None), ("waiting", None), ("waiting", None)]


def test_a_hold_with_an_end_time_is_released_by_the_leader(engine: sa.Engine) -> None:
    ids = add(engine, 1, concurrency_key="tenant:5")
    with engine.begin() as conn:
        now = db_now(conn)
        hold_id = place_hold(
            conn,
            HoldTarget.parse("concurrency_key", "tenant:5"),
            reason="partner outage",
            actor="ana",
            now=now,
            until=now + timedelta(hours=1),
        ).id
        assert release_expired(conn, now + timedelta(minutes=59)) == 0
        assert release_expired(conn, now + timedelta(hours=1)) == 1
        (record,) = [q.hold for q in quarantines(conn, active=False)]
    assert (record.id, record.active, record.released_by) == (
        hold_id, False, "jobdesk (end time reached)",
    )  # fmt: skip
    assert state(engine, ids) == [("queued", None)]


@pytest.mark.parametrize(
    ("match", "value", "reason", "field"),
    [
        ("tenant", "42", "x", "match"),
        ("concurrency_key", "  ", "x", "value"),
        ("concurrency_key", "t" * 201, "x", "value"),
        ("payload", "account_id", "x", "payload"),
        ("payload", "a=1 b=2", "x", "value"),
        ("concurrency_key", "tenant:1", " ", "reason"),
    ],
)
def test_bad_holds_are_refused_by_name(
    engine: sa.Engine, match: str, value: str, reason: str, field: str
) -> None:
    with engine.begin() as conn, pytest.raises(ValidationError) as refused:
        place_hold(
            conn, HoldTarget.parse(match, value), reason=reason, actor="ana", now=db_now(conn)
        )
    assert refused.value.field == field
    with engine.connect() as conn, pytest.raises(ValidationError, match="not an active hold"):
        release_hold(conn, 999, actor="ana", now=db_now(conn))
