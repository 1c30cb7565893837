"""What one webhook delivery attempt reads before it sends, in one statement.

An attempt needs the endpoint (URL, secrets, pause), the event's identity (the first
job of a requeue chain), the database time, whether the effect was already recorded,
and the endpoint's circuit breaker. Asked one by one that was five statements per
delivery, and their Python cost was a third of a delivery's CPU; here it is one SELECT
of the job's row outer-joined with the endpoint, breaker and effect rows, run on
psycopg's cursor on PostgreSQL (`Driver.execute_fast`).

The effect key depends on the chain's first job, which is only known after the read,
so the caller passes the key for "this job is its own origin" — true for every job
not requeued by an operator. For a requeued job `origin` is None: the caller walks the
chain (`delivery_origin`) and looks the effect up under the right key.

Given the attempt's lease token, the same statement also *reserves* the effect key
before anything is sent (the effects ledger, `shared.core.effects`): on PostgreSQL a
data-modifying CTE inserts the reservation, so the common delivery still costs one
round trip; on SQLite `reserve_effect` runs in the caller's transaction. The key is
only reserved where it is certainly the right one — the job is its own origin, or it
carries an idempotency key (the key is then the same for the whole chain) — and the
endpoint exists. Every other case (a requeued job without a key, a reservation held
or abandoned by another attempt, a concurrent insert the statement's snapshot cannot
see) leaves `reservation` None, and the caller asks `reserve_effect`, which waits,
takes over or skips.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.claim import JobRef
from jobdesk.shared.core.driver import driver, driver_named
from jobdesk.shared.core.driver.types import utcnow
from jobdesk.shared.core.effects import Reservation, reserve_effect
from jobdesk.shared.core.models import EffectState, effects, jobs
from jobdesk.shared.limits.breakers import CLOSED, BreakerView
from jobdesk.shared.limits.models import circuit_breakers
from jobdesk.shared.secrets.models import job_secrets
from jobdesk.shared.webhooks.deliveries import DeliveryOrigin
from jobdesk.shared.webhooks.endpoints import Endpoint
from jobdesk.shared.webhooks.models import webhook_endpoints
from jobdesk.shared.webhooks.secret_headers import SECRET_HEADER_PREFIX

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
    reservation: Reservation | None = None
    """With a lease token: the key is this attempt's (`mine`) or already done; None
    when `reserve_effect` must decide (see the module)."""
    secret_headers: bool = False
    """The job carries secrets named `header.<Name>` (sent as request headers)."""


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
        effects.c.state.label("effect_state"),
        effects.c.job_id.label("effect_job_id"),
        effects.c.detail.label("effect_detail"),
        # Only a job that carries header secrets reads (and opens) its secrets.
        sa.exists()
        .where(
            job_secrets.c.job_id == jobs.c.id,
            # Inline, not bound: the statement runs on psycopg with only the named params.
            job_secrets.c.name.like(sa.literal_column(f"'{SECRET_HEADER_PREFIX}%'")),
        )
        .label("secret_headers"),
    )
    .select_from(
        jobs.outerjoin(webhook_endpoints, webhook_endpoints.c.name == sa.bindparam("endpoint"))
        .outerjoin(circuit_breakers, circuit_breakers.c.key == sa.bindparam("breaker_key"))
        .outerjoin(effects, effects.c.key == sa.bindparam("effect_key"))
    )
    .where(jobs.c.id == sa.bindparam("job_id"))
)

#: Whether the key passed in is the chain's key whatever the origin (see the module).
_KEY_IS_THE_CHAINS = sa.or_(jobs.c.retried_from_id.is_(None), jobs.c.idempotency_key.is_not(None))

# PostgreSQL: the reservation rides along as a data-modifying CTE. The outer SELECT's
# snapshot predates the insert, so a fresh reservation shows as `reserved_now`, not as
# an effect row.
_RESERVE = (
    driver_named("postgresql")
    .insert(effects)
    .from_select(
        ["key", "state", "job_id", "lease_token", "created_at"],
        sa.select(
            sa.bindparam("effect_key", type_=effects.c.key.type),
            # Inline, not bound: the statement runs on psycopg with only the named params.
            sa.literal_column(f"'{EffectState.RESERVED.value}'"),
            jobs.c.id,
            sa.bindparam("lease_token", type_=effects.c.lease_token.type),
            utcnow(),
        )
        .select_from(
            jobs.join(webhook_endpoints, webhook_endpoints.c.name == sa.bindparam("endpoint"))
        )
        .where(jobs.c.id == sa.bindparam("job_id"), _KEY_IS_THE_CHAINS),
    )
    .on_conflict_do_nothing(index_elements=[effects.c.key])
    .returning(effects.c.id)
    .cte("reserved")
)
_RESERVING_STATEMENT = _STATEMENT.add_columns(
    sa.select(sa.func.count()).select_from(_RESERVE).scalar_subquery().label("reserved_now")
)

_NAMES = tuple(column.name for column in _STATEMENT.selected_columns)
_RESERVING_NAMES = tuple(column.name for column in _RESERVING_STATEMENT.selected_columns)


def preflight(
    conn: sa.Connection,
    *,
    job_id: int,
    endpoint: str,
    breaker_key: str,
    effect_key: str,
    lease_token: int | None = None,
) -> Preflight:
    """Everything the attempt of job `job_id` to `endpoint` must know before sending;
    with `lease_token`, the effect key reserved for that attempt as well."""
    params: dict[str, Any] = {
        "job_id": job_id,
        "endpoint": endpoint,
        "breaker_key": breaker_key,
        "effect_key": effect_key,
    }
    statement, names = _STATEMENT, _NAMES
    if lease_token is not None and driver(conn).writes_in_ctes:
        statement, names = _RESERVING_STATEMENT, _RESERVING_NAMES
        params["lease_token"] = lease_token
    found = driver(conn).execute_fast(conn, statement, params).fetchone()
    if found is None:
        raise LookupError(f"job {job_id} not found")
    row = dict(zip(names, found, strict=True))
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
    done = row["effect_state"] == EffectState.DONE.value
    effect = dict(row["effect_detail"] or {}) if done else None
    reservation = None
    if lease_token is not None:
        reservation = _reservation(conn, row, effect_key, JobRef(job_id, lease_token, 0, ""))
    return Preflight(
        endpoint_row,
        origin,
        row["now"],
        effect,
        breaker,
        reservation,
        bool(row["secret_headers"]),
    )


def _reservation(
    conn: sa.Connection, row: dict[str, Any], key: str, ref: JobRef
) -> Reservation | None:
    """The reservation the read settled, or None for `reserve_effect` to decide."""
    if row["effect_state"] == EffectState.DONE.value:
        return Reservation(done=dict(row["effect_detail"] or {}), by_job=row["effect_job_id"])
    if row["ep_id"] is None or not (row["retried_from_id"] is None or row["idempotency_key"]):
        return None
    if not driver(conn).writes_in_ctes:
        settled = reserve_effect(conn, key, ref, now=row["now"])
        return None if settled.held else settled
    if row.get("reserved_now"):
        return Reservation(mine=True)
    return None
