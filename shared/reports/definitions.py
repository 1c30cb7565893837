"""Report definitions: what a report counts, and how its source is sliced.

A definition is a *count by keys* over a table with an increasing integer id: each
`report.chunk` job aggregates one keyset slice `(after_id, upto_id]` with a `GROUP BY`
in the database, so a chunk holds at most `chunk_rows` source rows in flight and the
result it stores is one row per group — memory stays bounded however large the table
grows. Slices are planned by walking the id index (`ORDER BY id LIMIT 1 OFFSET n-1`),
never by loading the table.

Two definitions ship, both over the `jobs` table so they work without an app schema:

- `activity`: daily job activity — jobs created per day by type and status (params:
  optional `since` / `until` dates, `YYYY-MM-DD`, UTC, `until` exclusive).
- `nightly_activity`: the sign-up story's nightly report — for one day (param `date`,
  default yesterday UTC), jobs created that day by type, template/event and status. A
  sign-up enqueues its welcome email in the same transaction as the user row, so the
  `email.send`/`welcome` line counts that day's sign-ups.

Apps add their own with `register_report(ReportDefinition(...))`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.core.models import jobs

KeyBuilder = Callable[[sa.Connection], Sequence[sa.ColumnElement[Any]]]
ParamParser = Callable[[dict[str, Any], datetime], dict[str, Any]]
FilterBuilder = Callable[[dict[str, Any]], Sequence[sa.ColumnElement[bool]]]


@dataclass(frozen=True)
class ReportDefinition:
    """Count rows of `table` grouped by `keys`, over slices of `id_column`."""

    name: str
    description: str
    table: sa.Table
    id_column: str
    key_names: tuple[str, ...]
    keys: KeyBuilder
    parse_params: ParamParser
    where: FilterBuilder
    count_name: str = "count"

    @property
    def columns(self) -> tuple[str, ...]:
        return (*self.key_names, self.count_name)

    def id(self) -> sa.ColumnElement[int]:
        return self.table.c[self.id_column]


_registry: dict[str, ReportDefinition] = {}


def register_report(definition: ReportDefinition) -> ReportDefinition:
    existing = _registry.get(definition.name)
    if existing is not None and existing is not definition:
        raise ValueError(f"report {definition.name!r} is already registered")
    _registry[definition.name] = definition
    return definition


def get_report(name: str) -> ReportDefinition | None:
    return _registry.get(name)


def report_names() -> list[str]:
    return sorted(_registry)


def plan_slices(
    conn: sa.Connection, definition: ReportDefinition, params: dict[str, Any], chunk_rows: int
) -> list[tuple[int, int]]:
    """Keyset slices `(after_id, upto_id]` of at most `chunk_rows` matching rows each."""
    if chunk_rows < 1:
        raise ValueError("chunk_rows must be >= 1")
    id_col = definition.id()
    filters = list(definition.where(params))
    slices: list[tuple[int, int]] = []
    after = 0
    while True:
        boundary = conn.execute(
            sa.select(id_col)
            .where(id_col > after, *filters)
            .order_by(id_col)
            .limit(1)
            .offset(chunk_rows - 1)
        ).scalar()
        if boundary is None:
            last = conn.execute(sa.select(sa.func.max(id_col)).where(id_col > after, *filters))
            upto = last.scalar()
            if upto is not None:
                slices.append((after, int(upto)))
            return slices
        slices.append((after, int(boundary)))
        after = int(boundary)


def aggregate_slice(
    conn: sa.Connection,
    definition: ReportDefinition,
    params: dict[str, Any],
    after_id: int,
    upto_id: int,
) -> tuple[int, list[list[Any]]]:
    """(rows scanned, [[key…, count], …]) for one slice, grouped in the database."""
    id_col = definition.id()
    pairs = zip(definition.keys(conn), definition.key_names, strict=True)
    keys = [key.label(name) for key, name in pairs]
    bounds = [id_col > after_id, id_col <= upto_id, *definition.where(params)]
    rows = conn.execute(
        sa.select(*keys, sa.func.count().label("n")).where(*bounds).group_by(*keys)
    ).all()
    groups: list[list[Any]] = [
        [*(None if v is None else str(v) for v in row[:-1]), int(row[-1])] for row in rows
    ]
    return sum(group[-1] for group in groups), groups


# --- the shipped definitions -------------------------------------------------------------


def _day(conn: sa.Connection, column: sa.ColumnElement[Any]) -> sa.ColumnElement[str]:
    return driver(conn).utc_date_text(column)


def _parse_date(field: str, value: object) -> date:
    if not isinstance(value, str):
        raise ValidationError(f"params.{field}", "must be a date string YYYY-MM-DD")
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise ValidationError(f"params.{field}", f"{value!r} is not a date YYYY-MM-DD") from None


def _check_known(params: dict[str, Any], allowed: set[str]) -> None:
    if not isinstance(params, dict):
        raise ValidationError("params", "must be an object")
    unknown = set(params) - allowed
    if unknown:
        raise ValidationError("params", f"unknown parameter(s): {', '.join(sorted(unknown))}")


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(0), tzinfo=UTC)


def _activity_params(params: dict[str, Any], now: datetime) -> dict[str, Any]:
    del now
    _check_known(params, {"since", "until"})
    parsed: dict[str, Any] = {}
    for field in ("since", "until"):
        if params.get(field) is not None:
            parsed[field] = _parse_date(field, params[field]).isoformat()
    if "since" in parsed and "until" in parsed and parsed["since"] >= parsed["until"]:
        raise ValidationError("params.until", "must be after since")
    return parsed


def _activity_where(params: dict[str, Any]) -> list[sa.ColumnElement[bool]]:
    found: list[sa.ColumnElement[bool]] = []
    if "since" in params:
        found.append(jobs.c.created_at >= _midnight(date.fromisoformat(params["since"])))
    if "until" in params:
        found.append(jobs.c.created_at < _midnight(date.fromisoformat(params["until"])))
    return found


ACTIVITY = register_report(
    ReportDefinition(
        name="activity",
        description="Daily job activity: jobs created per day (UTC) by type and status.",
        table=jobs,
        id_column="id",
        key_names=("day", "job_type", "status"),
        keys=lambda conn: (_day(conn, jobs.c.created_at), jobs.c.job_type, jobs.c.status),
        parse_params=_activity_params,
        where=_activity_where,
        count_name="jobs",
    )
)


def _nightly_params(params: dict[str, Any], now: datetime) -> dict[str, Any]:
    _check_known(params, {"date"})
    if params.get("date") is None:
        day = (now.astimezone(UTC) - timedelta(days=1)).date()
    else:
        day = _parse_date("date", params["date"])
    return {"date": day.isoformat()}


def _nightly_where(params: dict[str, Any]) -> list[sa.ColumnElement[bool]]:
    start = _midnight(date.fromisoformat(params["date"]))
    return [jobs.c.created_at >= start, jobs.c.created_at < start + timedelta(days=1)]


def _subject(conn: sa.Connection) -> sa.ColumnElement[str]:
    del conn
    payload = jobs.c.payload
    return sa.func.coalesce(
        payload["template"].as_string(),
        payload["event"].as_string(),
        payload["report"].as_string(),
        "",
    )


NIGHTLY_ACTIVITY = register_report(
    ReportDefinition(
        name="nightly_activity",
        description=(
            "One day's activity (default yesterday, UTC): jobs created by type, "
            "template/event and status; email.send/welcome = sign-ups."
        ),
        table=jobs,
        id_column="id",
        key_names=("date", "job_type", "subject", "status"),
        keys=lambda conn: (
            _day(conn, jobs.c.created_at),
            jobs.c.job_type,
            _subject(conn),
            jobs.c.status,
        ),
        parse_params=_nightly_params,
        where=_nightly_where,
        count_name="jobs",
    )
)
