"""The demo app: a tiny sign-up service that owns two tables and enqueues its follow-up
work in the same transaction as its own write (R1).

This module stands in for *your* application, so it defines its own tables with
SQLAlchemy Core (they are not part of Jobdesk's schema) and talks to Jobdesk only
through the public API — `jobdesk.enqueue` — exactly as an app would.

A sign-up, in ONE transaction:

1. the `demo_users` row;
2. the welcome email — `email.send` with `to_user_id` (resolved by the worker at send
   time) and the idempotency key `welcome_email:user:<id>`;
3. the CRM webhook — `webhook.deliver` to endpoint `crm` with `data_ref` (the user's
   data is read when it is delivered, never copied into the payload);
4. the addition to the nightly activity report — a `demo_activity` row that the
   `demo_signups` report counts when it runs.

Roll the transaction back and none of it exists; commit and all of it does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.driver.types import UTCDateTime
from jobdesk.shared.core.enqueue import enqueue
from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.reports.definitions import ReportDefinition

CRM_ENDPOINT = "crm"
SIGNUP_EVENT = "user.created"
REPORT_NAME = "demo_signups"
#: The story's CRM webhook gives up after the 5th attempt (1 min, 5 min, 30 min, 2 h
#: between them in production; seconds in the demo).
CRM_MAX_ATTEMPTS = 5

metadata = sa.MetaData()

demo_users = sa.Table(
    "demo_users",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(100), nullable=False),
    sa.Column("email", sa.String(254), nullable=False, unique=True),
    sa.Column("plan", sa.String(20), nullable=False),
    sa.Column("created_at", UTCDateTime(), nullable=False),
    sqlite_autoincrement=True,
)

demo_activity = sa.Table(
    "demo_activity",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("user_id", sa.Integer, nullable=False, index=True),
    sa.Column("event", sa.String(50), nullable=False),
    sa.Column("plan", sa.String(20), nullable=False),
    #: UTC date as text, so the report groups the same way on SQLite and PostgreSQL.
    sa.Column("day", sa.String(10), nullable=False, index=True),
    sqlite_autoincrement=True,
)


@dataclass(frozen=True)
class SignUp:
    """What one sign-up wrote."""

    user_id: int
    email_job_id: int
    crm_job_id: int


PEOPLE: tuple[tuple[str, str], ...] = (
    ("Ana Lima", "ana"),
    ("Ben Okafor", "ben"),
    ("Chloe Martin", "chloe"),
    ("Dev Patel", "dev"),
    ("Eva Novak", "eva"),
    ("Femi Adeyemi", "femi"),
    ("Grace Kim", "grace"),
    ("Hugo Silva", "hugo"),
    ("Ines Costa", "ines"),
    ("Jonas Berg", "jonas"),
)
PLANS: tuple[str, ...] = ("free", "team", "free", "business")


def person(index: int) -> tuple[str, str, str]:
    """(name, email, plan) of the demo's `index`-th sign-up (0-based), unique per index."""
    name, handle = PEOPLE[index % len(PEOPLE)]
    round_ = index // len(PEOPLE)
    suffix = f" {round_ + 1}" if round_ else ""
    address = f"{handle}{round_ + 1 if round_ else ''}@example.com"
    return name + suffix, address, PLANS[index % len(PLANS)]


def create_tables(engine: sa.Engine) -> None:
    """Create the demo app's tables (idempotent)."""
    metadata.create_all(engine)


def has_users(conn: sa.Connection) -> bool:
    if not sa.inspect(conn).has_table(demo_users.name):
        return False
    return conn.execute(sa.select(demo_users.c.id).limit(1)).first() is not None


def count_users(conn: sa.Connection) -> int:
    return int(conn.execute(sa.select(sa.func.count()).select_from(demo_users)).scalar_one())


def sign_up(conn: sa.Connection, *, name: str, email: str, plan: str, now: datetime) -> SignUp:
    """Create a user and its follow-up work inside the caller's transaction."""
    user_id = int(
        conn.execute(
            sa.insert(demo_users)
            .values(name=name, email=email, plan=plan, created_at=now)
            .returning(demo_users.c.id)
        ).scalar_one()
    )
    email_job = enqueue(
        conn,
        "email.send",
        {"to_user_id": user_id, "template": "welcome", "event_id": f"signup:{user_id}"},
        idempotency_key=f"welcome_email:user:{user_id}",
    )
    crm_job = enqueue(
        conn,
        "webhook.deliver",
        {"endpoint": CRM_ENDPOINT, "event": SIGNUP_EVENT, "data_ref": {"user_id": user_id}},
        idempotency_key=f"webhook:user:{user_id}:event:user.created",
        max_attempts=CRM_MAX_ATTEMPTS,
    )
    conn.execute(
        sa.insert(demo_activity).values(
            user_id=user_id, event="signup", plan=plan, day=now.astimezone(UTC).date().isoformat()
        )
    )
    return SignUp(user_id, email_job, crm_job)


def request_nightly_report(conn: sa.Connection, day: date) -> int:
    """Enqueue the nightly sign-up report for `day` (once per day: idempotency key)."""
    return enqueue(
        conn,
        "report.generate",
        {"report": REPORT_NAME, "params": {"date": day.isoformat()}, "requested_by": "demo"},
        idempotency_key=f"nightly_report:{REPORT_NAME}:{day.isoformat()}",
    )


#: The nightly run, declared as a schedule: 02:00 UTC, the day that just ended.
NIGHTLY_SCHEDULE = "demo.nightly_signups"
NIGHTLY_CRON = "0 2 * * *"


def find_user(conn: sa.Connection, user_id: int) -> dict[str, Any] | None:
    row = conn.execute(sa.select(demo_users).where(demo_users.c.id == user_id)).first()
    return None if row is None else dict(row._mapping)


# --- the nightly report over demo_activity ----------------------------------------------


def _report_params(params: dict[str, Any], now: datetime) -> dict[str, Any]:
    if not isinstance(params, dict):
        raise ValidationError("params", "must be an object")
    unknown = set(params) - {"date"}
    if unknown:
        raise ValidationError("params", f"unknown parameter(s): {', '.join(sorted(unknown))}")
    raw = params.get("date")
    today = now.astimezone(UTC).date()
    if raw is None or raw == "today":
        return {"date": today.isoformat()}
    if raw == "yesterday":  # what the nightly schedule asks for: the day that just ended
        return {"date": (today - timedelta(days=1)).isoformat()}
    try:
        return {"date": date.fromisoformat(str(raw)).isoformat()}
    except ValueError:
        raise ValidationError(
            "params.date", f"{raw!r} is not a date YYYY-MM-DD, 'today' or 'yesterday'"
        ) from None


SIGNUPS_REPORT = ReportDefinition(
    name=REPORT_NAME,
    description="The demo's nightly activity report: one day's sign-ups by plan.",
    table=demo_activity,
    id_column="id",
    key_names=("day", "event", "plan"),
    keys=lambda conn: (demo_activity.c.day, demo_activity.c.event, demo_activity.c.plan),
    parse_params=_report_params,
    where=lambda params: [demo_activity.c.day == params["date"]],
    count_name="users",
)
