"""The effects ledger's reservations: one attempt at a time per key; a reservation whose
attempt lost its job is taken over; done is done."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from jobdesk.shared.core.claim import ClaimedJob, claim
from jobdesk.shared.core.effects import (
    complete_effect,
    find_effect,
    release_effect,
    reserve_effect,
)
from tests.factories import make_job

NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)


def running(engine: sa.Engine, count: int) -> list[ClaimedJob]:
    with engine.begin() as conn:
        for _ in range(count):
            make_job(conn, next_run_at=NOW - timedelta(seconds=1))
        return claim(conn, worker_id="w", limit=count, now=NOW, lease_seconds=30)


def test_one_attempt_at_a_time_then_done(engine: sa.Engine) -> None:
    first, second = running(engine, 2)
    with engine.begin() as conn:
        assert reserve_effect(conn, "mail:1", first.ref, now=NOW).mine
        assert reserve_effect(conn, "mail:1", first.ref, now=NOW).mine  # re-entrant
        held = reserve_effect(conn, "mail:1", second.ref, now=NOW)
        assert held.held
        assert held.by_job == first.id
        assert find_effect(conn, "mail:1") is None  # reserved is not done
        assert complete_effect(conn, "mail:1", first.ref, {"message_id": "<m1>"})
        done = reserve_effect(conn, "mail:1", second.ref, now=NOW)
    assert done.done == {"message_id": "<m1>"}
    assert done.by_job == first.id


def test_a_reservation_whose_attempt_lost_its_job_is_taken_over(engine: sa.Engine) -> None:
    first, second = running(engine, 2)
    with engine.begin() as conn:
        assert reserve_effect(conn, "hook:1", first.ref, now=NOW).mine
        # The first worker vanished: its lease ran out 30 s after the claim.
        later = NOW + timedelta(seconds=31)
        taken = reserve_effect(conn, "hook:1", second.ref, now=later)
        assert taken.mine
        assert taken.taken_over_from == first.id
        # The old attempt's late completion does not overwrite the new owner's.
        assert not release_effect(conn, "hook:1", first.ref)
        assert complete_effect(conn, "hook:1", second.ref, {"by": "second"})
        assert find_effect(conn, "hook:1") == {"by": "second"}


def test_a_released_reservation_lets_the_next_attempt_go(engine: sa.Engine) -> None:
    first, second = running(engine, 2)
    with engine.begin() as conn:
        assert reserve_effect(conn, "mail:2", first.ref, now=NOW).mine
        assert release_effect(conn, "mail:2", first.ref)
        assert reserve_effect(conn, "mail:2", second.ref, now=NOW).mine
