"""The one statement a delivery reads before sending: the same answers on both databases,
UTC times whatever the session's zone, database errors as SQLAlchemy's."""

from __future__ import annotations

from datetime import UTC, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import enqueue
from jobdesk.shared.core.claim import JobRef
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.driver import postgresql_fast
from jobdesk.shared.core.effects import Reservation, complete_effect, record_effect
from jobdesk.shared.core.models import effects, jobs
from jobdesk.shared.limits.breakers import CLOSED, OPEN, record_failure
from jobdesk.shared.webhooks.endpoints import add_endpoint
from jobdesk.shared.webhooks.preflight import preflight


def test_endpoint_origin_effect_and_breaker_in_one_read(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        now = db_now(conn)
        add_endpoint(conn, "crm", "http://127.0.0.1:9/hook", allow_private=True, now=now)
        job_id = enqueue(conn, "webhook.deliver", {"endpoint": "crm", "event": "e"})
    with engine.connect() as conn:
        facts = preflight(
            conn, job_id=job_id, endpoint="crm", breaker_key="webhook:crm", effect_key="k1"
        )
    assert facts.endpoint is not None
    assert (facts.endpoint.name, facts.endpoint.paused) == ("crm", False)
    assert facts.origin is not None
    assert facts.origin.job_id == job_id
    assert (facts.effect, facts.breaker.state, facts.breaker.key) == (None, CLOSED, "webhook:crm")
    assert facts.now.tzinfo is UTC
    assert abs(facts.now - now) < timedelta(minutes=1)
    with engine.begin() as conn:
        record_effect(conn, "k1", job_id=job_id, detail={"status_code": 204})
        for _ in range(3):
            record_failure(conn, "webhook:crm", now, "HTTP 503", threshold=3)
        copy = conn.execute(
            sa.insert(jobs)
            .values(job_type="webhook.deliver", payload={}, retried_from_id=job_id)
            .returning(jobs.c.id)
        ).scalar_one()
    with engine.connect() as conn:
        again = preflight(
            conn, job_id=job_id, endpoint="crm", breaker_key="webhook:crm", effect_key="k1"
        )
        requeued = preflight(
            conn, job_id=copy, endpoint="nope", breaker_key="webhook:nope", effect_key="k2"
        )
        with pytest.raises(LookupError, match="not found"):
            preflight(conn, job_id=copy + 1, endpoint="crm", breaker_key="b", effect_key="k")
    assert again.effect == {"status_code": 204}
    assert (again.breaker.state, again.breaker.consecutive_failures) == (OPEN, 3)
    assert again.breaker.retry_at is not None
    assert again.breaker.retry_at.tzinfo is UTC
    assert (requeued.endpoint, requeued.origin, requeued.effect) == (None, None, None)


@pytest.mark.postgresql_only
def test_times_are_utc_in_any_session_zone(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        now = db_now(conn)
        add_endpoint(conn, "crm", "http://127.0.0.1:9/hook", allow_private=True, now=now)
        job_id = enqueue(conn, "webhook.deliver", {"endpoint": "crm", "event": "e"})
    with engine.connect() as conn:
        conn.exec_driver_sql("SET TIME ZONE 'America/New_York'")
        facts = preflight(
            conn, job_id=job_id, endpoint="crm", breaker_key="webhook:crm", effect_key="k"
        )
        conn.exec_driver_sql("RESET TIME ZONE")
    assert facts.endpoint is not None
    assert facts.now.tzinfo is UTC
    assert facts.endpoint.created_at.tzinfo is UTC
    assert abs(facts.endpoint.created_at - now) < timedelta(minutes=1)


@pytest.mark.postgresql_only
def test_driver_errors_come_back_as_sqlalchemy_errors(engine: sa.Engine) -> None:
    broken = sa.select(sa.literal_column("no_such_column")).select_from(jobs)
    with engine.connect() as conn, pytest.raises(sa.exc.ProgrammingError):
        postgresql_fast.execute(conn, broken, {})


def _effects(engine: sa.Engine) -> list[tuple[str, str, int | None, int | None]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(effects.c.key, effects.c.state, effects.c.job_id, effects.c.lease_token)
        )
        return [tuple(r) for r in rows]


def test_the_read_reserves_the_effect_key_for_the_attempt(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        now = db_now(conn)
        add_endpoint(conn, "crm", "http://127.0.0.1:9/hook", allow_private=True, now=now)
        first = enqueue(conn, "webhook.deliver", {"endpoint": "crm", "event": "e"})
        keyed = enqueue(
            conn, "webhook.deliver", {"endpoint": "crm", "event": "e"}, idempotency_key="evt-1"
        )
        twin = conn.execute(
            sa.insert(jobs)
            .values(job_type="webhook.deliver", payload={}, idempotency_key="evt-1",
                    retried_from_id=keyed)
            .returning(jobs.c.id)
        ).scalar_one()  # fmt: skip
        unkeyed_copy = conn.execute(
            sa.insert(jobs)
            .values(job_type="webhook.deliver", payload={}, retried_from_id=first)
            .returning(jobs.c.id)
        ).scalar_one()

    def read(job_id: int, key: str, endpoint: str = "crm", token: int = 7) -> Any:
        with engine.begin() as conn:
            return preflight(
                conn, job_id=job_id, endpoint=endpoint, breaker_key="b", effect_key=key,
                lease_token=token,
            ).reservation  # fmt: skip

    assert read(first, "k-first") == Reservation(mine=True)
    assert read(keyed, "evt-1") == Reservation(mine=True)
    # A requeue without a key: the key passed in is not the chain's, so nothing reserved.
    assert read(unkeyed_copy, f"k-copy-{unkeyed_copy}") is None
    assert read(first, "k-nowhere", endpoint="nope") is None
    assert sorted(_effects(engine)) == [
        ("evt-1", "reserved", keyed, 7),
        ("k-first", "reserved", first, 7),
    ]
    with engine.begin() as conn:
        complete_effect(conn, "k-first", JobRef(first, 7, 1, "w"), {"status_code": 204})
    assert read(first, "k-first", token=9) == Reservation(done={"status_code": 204}, by_job=first)
    # The twin's key is the chain's (it carries the idempotency key), reserved by an
    # attempt that is not running: PostgreSQL leaves it to the ledger (`reserve_effect`:
    # wait, take over or skip); on SQLite, where the read is a transaction, the ledger
    # has already taken it over.
    taken = read(twin, "evt-1", token=8)
    assert taken in (None, Reservation(mine=True, taken_over_from=keyed))
    assert (taken is None) == (engine.dialect.name == "postgresql")
