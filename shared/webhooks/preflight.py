"""What one webhook delivery attempt reads before it sends, in one statement.

An attempt needs the endpoint (URL, secrets, pause), the event's identity (the first
job of a requeue chain), the database time, whether the effect was already recorded,
and the endpoint's circuit breaker. Asked one by one that was five statements per
delivery, and their Python cost was a third of a delivery's CPU; here it is one SELECT
of the job's row outer-joined with the endpoint, breaker and effect rows, run on
psycopg's cursor on PostgreSQL (`jobdesk.shared.core.driver_sql`).

The effect key depends on the chain's first job, which is only known after the read,
so the caller passes the key for "this job is its own origin" — true for every job
not requeued by an operator. For a requeued job `origin` is None: the caller walks the
chain (`delivery_origin`) and looks the effect up under the right key.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core import driver_sql
from jobdesk.shared.core.db import is_postgresql
from jobdesk.shared.core.models import effects, jobs
from jobdesk.shared.core.sqltypes import utcnow
from jobdesk.shared.limits.breakers import CLOSED, BreakerView
from jobdesk.shared.limits.models import circuit_breakers
from jobdesk.shared.webhooks.deliveries import DeliveryOrigin
from jobdesk.shared.webhooks.endpoints import Endpoint
from jobdesk.shared.webhooks.models import webhook_endpoints

_ENDPOINT_FIELDS = tuple(f.name for f in fields(Endpoint))
_BREAKER_FIELDS = tuple(f.name for f in fields(BreakerView) if f.name != "key")


@dataclass(frozen=True, slots=True)
class Preflight:
    endpoint: Endpoint | None
    """None: no endpoint of that name."""
    origin: DeliveryOrigin | None
    """The job itself when it was not requeued; None when it was (walk the chain)."""
    now: datetime
    effect: dict[str, Any] | None
    """The recorded detail under the key passed in (`{}` if none stored), or None."""
    breaker: BreakerView


# Built once: a statement object reused with new parameters skips SQLAlchemy's
# construction and cache-key work on every call.
_STATEMENT = (
    sa.select(
        jobs.c.id,
        jobs.c.retried_from_id,
        jobs.c.created_at,
        jobs.c.idempotency_key,
        utcnow().label("now"),
        *(webhook_endpoints.c[name].label(f"ep_{name}") for name in _ENDPOINT_FIELDS),
        *(circuit_breakers.c[name].label(f"br_{name}") for name in _BREAKER_FIELDS),
        effects.c.id.label("effect_id"),
        effects.c.detail.label("effect_detail"),
    )
    .select_from(
        jobs.outerjoin(webhook_endpoints, webhook_endpoints.c.name == sa.bindparam("endpoint"))
        .outerjoin(circuit_breakers, circuit_breakers.c.key == sa.bindparam("breaker_key"))
        .outerjoin(effects, effects.c.key == sa.bindparam("effect_key"))
    )
    .where(jobs.c.id == sa.bindparam("job_id"))
)


_NAMES = tuple(column.name for column in _STATEMENT.selected_columns)


def preflight(
    conn: sa.Connection, *, job_id: int, endpoint: str, breaker_key: str, effect_key: str
) -> Preflight:
    """Everything the attempt of job `job_id` to `endpoint` must know before sending."""
    params = {
        "job_id": job_id,
        "endpoint": endpoint,
        "breaker_key": breaker_key,
        "effect_key": effect_key,
    }
    if is_postgresql(conn):
        found = driver_sql.execute(conn, _STATEMENT, params).fetchone()
    else:
        found = conn.execute(_STATEMENT, params).first()
    if found is None:
        raise LookupError(f"job {job_id} not found")
    row = dict(zip(_NAMES, found, strict=True))
    for name, value in row.items():  # the cursor's datetimes carry the session's zone
        if isinstance(value, datetime):
            row[name] = value.astimezone(UTC)
    endpoint_row = None
    if row["ep_id"] is not None:
        endpoint_row = Endpoint(**{name: row[f"ep_{name}"] for name in _ENDPOINT_FIELDS})
    origin = None
    if row["retried_from_id"] is None:
        origin = DeliveryOrigin(row["id"], row["created_at"], row["idempotency_key"])
    if row["br_state"] is None:
        breaker = BreakerView(breaker_key, CLOSED, 0, None, None, None, None)
    else:
        breaker = BreakerView(breaker_key, **{n: row[f"br_{n}"] for n in _BREAKER_FIELDS})
    effect = None if row["effect_id"] is None else dict(row["effect_detail"] or {})
    return Preflight(endpoint_row, origin, row["now"], effect, breaker)
