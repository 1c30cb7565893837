"""Reading the audit trail back: one job's entries, and filtered, keyset-paginated pages.

Entries are written by `core.audit` in the transaction of each decision.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.audit import AuditAction, audit_log
from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.operator.filters import MAX_ID, AuditFilters

#: Every action name the application writes (the audit page filters by these).
ACTIONS: tuple[str, ...] = tuple(AuditAction)


@dataclass(frozen=True, slots=True)
class AuditRow:
    id: int
    at: datetime
    actor: str
    action: str
    job_id: int | None
    new_job_id: int | None
    subject: str | None
    reason: str | None
    details: dict[str, Any] | None


def _row(row: Any) -> AuditRow:
    return AuditRow(
        row.id,
        row.at,
        row.actor,
        row.action,
        row.job_id,
        row.new_job_id,
        row.subject,
        row.reason,
        row.details,
    )


def entries_for_job(conn: sa.Connection, job_id: int, limit: int = 200) -> list[AuditRow]:
    """Entries about a job: actions on it and the retry that created it."""
    query = (
        sa.select(audit_log)
        .where(sa.or_(audit_log.c.job_id == job_id, audit_log.c.new_job_id == job_id))
        .order_by(audit_log.c.id.desc())
        .limit(limit)
    )
    return [_row(row) for row in conn.execute(query)]


def encode_cursor(entry_id: int) -> str:
    return base64.urlsafe_b64encode(f"a{entry_id}".encode()).decode().rstrip("=")


def decode_cursor(raw: str | None) -> int | None:
    if not raw:
        return None
    try:
        text = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ValidationError("after", "is not a valid page cursor") from None
    digits = text[1:]
    if not text.startswith("a") or not (digits.isascii() and digits.isdigit()) or len(text) > 20:
        raise ValidationError("after", "is not a valid page cursor")
    if not 1 <= int(digits) <= MAX_ID:
        raise ValidationError("after", "is not a valid page cursor")
    return int(digits)


@dataclass(frozen=True, slots=True)
class AuditPage:
    items: list[AuditRow]
    next_cursor: str | None


def list_audit(conn: sa.Connection, filters: AuditFilters, after: str | None = None) -> AuditPage:
    """Newest first, keyset-paginated by id."""
    query = sa.select(audit_log)
    if filters.actor:
        query = query.where(audit_log.c.actor == filters.actor)
    if filters.action:
        query = query.where(audit_log.c.action == filters.action)
    if filters.job_id:
        query = query.where(
            sa.or_(audit_log.c.job_id == filters.job_id, audit_log.c.new_job_id == filters.job_id)
        )
    if filters.since:
        query = query.where(audit_log.c.at >= filters.since)
    if filters.until:
        query = query.where(audit_log.c.at <= filters.until)
    cursor = decode_cursor(after)
    if cursor is not None:
        query = query.where(audit_log.c.id < cursor)
    query = query.order_by(audit_log.c.id.desc()).limit(filters.page_size + 1)
    rows = [_row(row) for row in conn.execute(query)]
    more = len(rows) > filters.page_size
    rows = rows[: filters.page_size]
    return AuditPage(rows, encode_cursor(rows[-1].id) if more and rows else None)
