"""The webhook delivery log: one row per HTTP request made for a `webhook.deliver` job.

Each row keeps what an operator needs to understand an attempt without the receiver's
logs: the `webhook-id` sent, the URL, status code, latency, outcome (`delivered`,
`retry`, `rejected`, `gone`, `timeout`, `connect_error`, `unknown` …) and a masked,
truncated excerpt of the response body. The dashboard's job page lists them.

Also here: the identity of a delivery across requeues (`delivery_origin`), so a dead
job requeued by an operator sends the same `webhook-id` as the original.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.claim import JobRef
from jobdesk.shared.core.driver import driver, driver_named
from jobdesk.shared.core.driver.types import JSONDocument
from jobdesk.shared.core.driver_sql import BatchedWrite
from jobdesk.shared.core.effects import check_effect_key, complete_effect
from jobdesk.shared.core.masking import sanitize_error
from jobdesk.shared.core.models import EffectState, effects, jobs
from jobdesk.shared.webhooks.models import webhook_deliveries

EXCERPT_CHARS = 2000
MAX_CHAIN = 1000
MAX_LIST = 100


@dataclass(frozen=True)
class DeliveryOrigin:
    """The first job of a requeue chain: its id and creation time identify the event."""

    job_id: int
    created_at: datetime
    idempotency_key: str | None


def delivery_origin(conn: sa.Connection, job_id: int) -> DeliveryOrigin:
    """Follow `retried_from_id` back to the original job (bounded walk)."""
    current = job_id
    for _ in range(MAX_CHAIN):
        row = conn.execute(
            sa.select(
                jobs.c.id, jobs.c.retried_from_id, jobs.c.created_at, jobs.c.idempotency_key
            ).where(jobs.c.id == current)
        ).first()
        if row is None:
            raise LookupError(f"job {current} not found")
        if row.retried_from_id is None:
            return DeliveryOrigin(row.id, row.created_at, row.idempotency_key)
        current = row.retried_from_id
    raise LookupError(f"requeue chain of job {job_id} is longer than {MAX_CHAIN}")


def excerpt(body: bytes | str | None, *, total_bytes: int | None = None) -> str | None:
    """A storable excerpt of a response body: valid UTF-8, masked, truncated."""
    if body is None:
        return None
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    clean = sanitize_error(text, EXCERPT_CHARS) or ""
    if total_bytes is not None and total_bytes > len(body):
        clean += f" [response body read capped; {len(body):,} of ≥{total_bytes:,} bytes]"
    return clean


# Built once and executed with fresh parameters: no statement construction per delivery.
_DELIVERY_FIELDS = (
    "job_id",
    "attempt",
    "endpoint",
    "webhook_id",
    "url",
    "at",
    "status_code",
    "latency_ms",
    "outcome",
    "response_excerpt",
    "error",
)
_INSERT = sa.insert(webhook_deliveries).values(
    {name: sa.bindparam(name, type_=webhook_deliveries.c[name].type) for name in _DELIVERY_FIELDS}
)
# Any number of log rows, and the effect records of those that delivered, as ONE
# statement (PostgreSQL runs every data-modifying CTE exactly once, referenced or not):
# atomic on its own, so the worker can send it in autocommit without BEGIN and COMMIT
# round trips, and a completer batch costs one statement however many deliveries it
# holds. The rows travel as one JSON array (one `json.dumps`; psycopg would build a text
# array per column in Python, about twice the client CPU per row at 16 rows).
# `complete_effect`'s rules: an attempt's own reservation becomes done; a key nobody
# holds is inserted done; a key another attempt took over, or already done, is left as
# it is (the insert finds it and does nothing — never an error, even for a key twice in
# one batch). Constants inline, not bound: psycopg gets the one JSON parameter only.
_DONE: sa.ColumnClause[str] = sa.literal_column(f"'{EffectState.DONE.value}'")
_RESERVED: sa.ColumnClause[str] = sa.literal_column(f"'{EffectState.RESERVED.value}'")
_COLUMNS: dict[str, sa.types.TypeEngine[Any]] = {
    **{name: webhook_deliveries.c[name].type for name in _DELIVERY_FIELDS},
    "effect_key": effects.c.key.type,
    "effect_detail": JSONDocument,
    "lease_token": effects.c.lease_token.type,
}
_rows = (
    sa.func.jsonb_to_recordset(sa.bindparam("rows", type_=JSONDocument))
    .table_valued(*(sa.column(name, type_) for name, type_ in _COLUMNS.items()))
    .render_derived(name="delivery", with_types=True)
)
_given = sa.select(_rows).cte("given")
_logged = (
    sa.insert(webhook_deliveries)
    .from_select(_DELIVERY_FIELDS, sa.select(*(_given.c[name] for name in _DELIVERY_FIELDS)))
    .cte("logged")
)
_completed = (
    sa.update(effects)
    .where(
        effects.c.key == _given.c.effect_key,
        effects.c.state == _RESERVED,
        effects.c.job_id == _given.c.job_id,
        effects.c.lease_token == _given.c.lease_token,
    )
    .values(state=_DONE, detail=_given.c.effect_detail)
    .returning(effects.c.key)
    .cte("completed")
)
# PostgreSQL (`Driver.writes_in_ctes`): the rows, the log and the effects in one statement.
_WRITE_DELIVERIES = (
    driver_named("postgresql")
    .insert(effects)
    .from_select(
        ["key", "job_id", "detail"],
        sa.select(_given.c.effect_key, _given.c.job_id, _given.c.effect_detail).where(
            _given.c.effect_key.is_not(None),
            _given.c.effect_key.not_in(sa.select(_completed.c.key)),
        ),
    )
    .on_conflict_do_nothing(index_elements=[effects.c.key])
    .add_cte(_given, _logged, _completed)
)


def _write_deliveries(conn: sa.Connection, rows: list[dict[str, Any]]) -> None:
    """PostgreSQL: the delivery rows (each with its effect, if any) in one statement."""
    document = [{**row, "at": row["at"].isoformat()} for row in rows]
    run = driver(conn)
    run.execute_fast(conn, _WRITE_DELIVERIES, {"rows": run.json_param(document)})


def _row(
    job_id: int,
    attempt: int,
    endpoint: str,
    webhook_id: str,
    url: str,
    outcome: str,
    now: datetime,
    status_code: int | None = None,
    latency_ms: float | None = None,
    response_excerpt: str | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "attempt": attempt,
        "endpoint": endpoint,
        "webhook_id": webhook_id,
        "url": sanitize_error(url, 2000) or "",
        "at": now,
        "status_code": status_code,
        "latency_ms": latency_ms,
        "outcome": outcome,
        "response_excerpt": response_excerpt,
        "error": sanitize_error(error),
    }


def record_delivery(
    conn: sa.Connection,
    *,
    job_id: int,
    attempt: int,
    endpoint: str,
    webhook_id: str,
    url: str,
    outcome: str,
    now: datetime,
    status_code: int | None = None,
    latency_ms: float | None = None,
    response_excerpt: str | None = None,
    error: str | None = None,
    effect: tuple[str, dict[str, Any]] | None = None,
    lease_token: int | None = None,
) -> None:
    """Append one delivery row; with `effect` (key, detail) also mark the effect done —
    the reservation of the attempt `(job_id, lease_token)`, or a new record.

    On PostgreSQL this is a single statement either way; on SQLite the caller's
    transaction holds the two writes together.
    """
    row = _row(
        job_id,
        attempt,
        endpoint,
        webhook_id,
        url,
        outcome,
        now,
        status_code,
        latency_ms,
        response_excerpt,
        error,
    )
    if not driver(conn).writes_in_ctes:
        conn.execute(_INSERT, row)
        if effect is not None:
            owner = JobRef(job_id, lease_token if lease_token is not None else -1, attempt, "")
            complete_effect(conn, effect[0], owner, effect[1])
        return
    # Run on psycopg's cursor: once per delivery, SQLAlchemy's layer was most of its cost.
    _delivery_write(row, effect, lease_token)(conn)


def delivery_writer(
    bind: sa.Engine,
    *,
    effect: tuple[str, dict[str, Any]] | None = None,
    lease_token: int | None = None,
    **fields: Any,
) -> Callable[[sa.Connection], None]:
    """`record_delivery` with these arguments, as a write to make later in another
    transaction (`ctx.with_outcome`). On PostgreSQL it is one row of a prebuilt
    statement, which the completer sends once for all the deliveries of its batch."""
    if not driver(bind).writes_in_ctes:
        return functools.partial(record_delivery, effect=effect, lease_token=lease_token, **fields)
    return _delivery_write(_row(**fields), effect, lease_token)


def _delivery_write(
    row: dict[str, Any], effect: tuple[str, dict[str, Any]] | None, lease_token: int | None
) -> BatchedWrite:
    """PostgreSQL: the delivery row (and the effect marked done), batchable."""
    key = None if effect is None else check_effect_key(effect[0])
    detail = None if effect is None else (effect[1] or {})
    params = {**row, "effect_key": key, "effect_detail": detail, "lease_token": lease_token}
    return BatchedWrite(_write_deliveries, params)


def list_deliveries(conn: sa.Connection, job_id: int) -> list[dict[str, Any]]:
    """The delivery log of one job, oldest first."""
    rows = conn.execute(
        sa.select(webhook_deliveries)
        .where(webhook_deliveries.c.job_id == job_id)
        .order_by(webhook_deliveries.c.id)
        .limit(MAX_LIST)
    )
    return [dict(row._mapping) for row in rows]


def recent_deliveries(
    conn: sa.Connection, endpoint: str, *, limit: int = 50
) -> list[dict[str, Any]]:
    """The latest deliveries to one endpoint, newest first."""
    rows = conn.execute(
        sa.select(webhook_deliveries)
        .where(webhook_deliveries.c.endpoint == endpoint)
        .order_by(webhook_deliveries.c.at.desc(), webhook_deliveries.c.id.desc())
        .limit(min(max(limit, 1), MAX_LIST))
    )
    return [dict(row._mapping) for row in rows]
