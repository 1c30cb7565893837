"""The one statement a delivery reads before sending: the same answers on both databases,
UTC times whatever the session's zone, database errors as SQLAlchemy's."""

from __future__ import annotations

from datetime import UTC, timedelta

import pytest
import sqlalchemy as sa

from jobdesk import enqueue
from jobdesk.shared.core import driver_sql
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.effects import record_effect
from jobdesk.shared.core.models import jobs
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
        driver_sql.execute(conn, broken, {})
