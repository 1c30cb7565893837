"""Webhook endpoints: named destinations, their signing secrets and operator pauses.

An endpoint (`crm`) has a URL, a secret shown once at creation (`whsec_<base64>` of 32
random bytes) and, during a rotation, the previous secret until the overlap ends —
deliveries are signed with both meanwhile, so receivers can switch at their own pace.

Pausing holds the endpoint's jobs without burning their attempts (the handler snoozes
them); resuming releases them at once. A `410 Gone` from the receiver disables the
endpoint: it is paused with the reason until an operator resumes it. Every pause,
resume, rotation and disable writes an `audit_log` row in the same transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core import audit, validation
from jobdesk.shared.core.audit import AuditAction
from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.errors import ConflictError, NotFoundError, ValidationError
from jobdesk.shared.core.masking import mask_text
from jobdesk.shared.webhooks.models import webhook_endpoints
from jobdesk.shared.webhooks.signing import generate_secret
from jobdesk.shared.webhooks.ssrf import Resolver, UnsafeURLError, check_url

WEBHOOK_JOB_TYPE = "webhook.deliver"
DEFAULT_ROTATION_OVERLAP = timedelta(hours=24)


@dataclass(frozen=True)
class Endpoint:
    """A webhook endpoint as stored (the secrets stay out of `repr`)."""

    id: int
    name: str
    url: str
    secret: str
    previous_secret: str | None
    previous_secret_expires_at: datetime | None
    paused: bool
    paused_until: datetime | None
    paused_reason: str | None
    disabled_reason: str | None
    created_at: datetime
    updated_at: datetime

    def __repr__(self) -> str:
        return f"Endpoint(name={self.name!r}, url={self.url!r}, paused={self.paused})"

    def is_paused(self, now: datetime) -> bool:
        """Paused, and not past an automatic end of the pause."""
        return self.paused and (self.paused_until is None or self.paused_until > now)

    def signing_secrets(self, now: datetime) -> list[str]:
        """The current secret, plus the previous one while the rotation overlap lasts."""
        found = [self.secret]
        if (
            self.previous_secret
            and self.previous_secret_expires_at is not None
            and self.previous_secret_expires_at > now
        ):
            found.append(self.previous_secret)
        return found

    def public(self, now: datetime) -> dict[str, Any]:
        """What a listing may show: everything but the secrets."""
        return {
            "name": self.name,
            "url": self.url,
            "paused": self.is_paused(now),
            "paused_until": self.paused_until,
            "paused_reason": self.paused_reason,
            "disabled_reason": self.disabled_reason,
            "rotating_until": self.previous_secret_expires_at
            if len(self.signing_secrets(now)) > 1
            else None,
            "created_at": self.created_at,
        }


def _endpoint(row: sa.Row[Any]) -> Endpoint:
    return Endpoint(**{name: getattr(row, name) for name in Endpoint.__dataclass_fields__})


def _audit(
    conn: sa.Connection,
    *,
    actor: str,
    action: AuditAction,
    name: str,
    now: datetime,
    reason: str | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    audit.record(
        conn,
        actor=actor,
        action=action,
        subject=f"endpoint:{name}",
        reason=reason,
        details=details,
        now=now,
    )


def check_endpoint_url(url: str, *, allow_private: bool, resolve: Resolver | None = None) -> str:
    """The URL if the SSRF guard accepts it; `ValidationError("url", why)` otherwise."""
    try:
        if resolve is None:
            check_url(url, allow_private=allow_private)
        else:
            check_url(url, allow_private=allow_private, resolve=resolve)
    except (UnsafeURLError, OSError) as exc:
        raise ValidationError("url", str(exc)) from None
    return url


def add_endpoint(
    conn: sa.Connection,
    name: str,
    url: str,
    *,
    allow_private: bool = False,
    now: datetime,
    actor: str = "cli",
    resolve: Resolver | None = None,
) -> str:
    """Create endpoint `name` for `url` and return its new signing secret (show it once)."""
    validation.check_name("endpoint", name)
    check_endpoint_url(url, allow_private=allow_private, resolve=resolve)
    if get_endpoint(conn, name) is not None:
        raise ConflictError(f"endpoint {name!r} already exists")
    secret = generate_secret()
    conn.execute(
        sa.insert(webhook_endpoints).values(
            name=name, url=url, secret=secret, created_at=now, updated_at=now
        )
    )
    _audit(
        conn,
        actor=actor,
        action=AuditAction.ENDPOINT_ADD,
        name=name,
        now=now,
        details={"url": mask_text(url)},
    )
    return secret


def set_endpoint_url(
    conn: sa.Connection,
    name: str,
    url: str,
    *,
    allow_private: bool = False,
    now: datetime,
    actor: str = "cli",
    resolve: Resolver | None = None,
) -> None:
    """Point endpoint `name` at `url` (vetted as at creation); the secret stays."""
    check_endpoint_url(url, allow_private=allow_private, resolve=resolve)
    previous = require_endpoint(conn, name)
    _update(conn, name, url=url, updated_at=now)
    _audit(
        conn,
        actor=actor,
        action=AuditAction.ENDPOINT_SET_URL,
        name=name,
        now=now,
        details={"from": mask_text(previous.url), "to": mask_text(url)},
    )


def get_endpoint(conn: sa.Connection, name: str) -> Endpoint | None:
    row = conn.execute(sa.select(webhook_endpoints).where(webhook_endpoints.c.name == name)).first()
    return None if row is None else _endpoint(row)


def require_endpoint(conn: sa.Connection, name: str) -> Endpoint:
    endpoint = get_endpoint(conn, name)
    if endpoint is None:
        raise NotFoundError(f"no webhook endpoint named {name!r}")
    return endpoint


def list_endpoints(conn: sa.Connection) -> list[Endpoint]:
    rows = conn.execute(sa.select(webhook_endpoints).order_by(webhook_endpoints.c.name))
    return [_endpoint(row) for row in rows]


def _update(conn: sa.Connection, name: str, **values: Any) -> None:
    result = conn.execute(
        sa.update(webhook_endpoints).where(webhook_endpoints.c.name == name).values(**values)
    )
    if result.rowcount == 0:
        raise NotFoundError(f"no webhook endpoint named {name!r}")


def pause_endpoint(
    conn: sa.Connection,
    name: str,
    *,
    actor: str,
    reason: str | None,
    until: datetime | None = None,
    now: datetime,
) -> None:
    """Hold the endpoint's deliveries (jobs wait without burning attempts). A reason is
    required, as for every pause (queues, schedules): others need to know why."""
    clean = validation.check_reason(reason, required=True)
    if until is not None and until <= now:
        raise ValidationError("until", "must be in the future")
    _update(conn, name, paused=True, paused_until=until, paused_reason=clean, updated_at=now)
    details = {"until": until.isoformat()} if until else None
    _audit(
        conn,
        actor=actor,
        action=AuditAction.ENDPOINT_PAUSE,
        name=name,
        now=now,
        reason=clean,
        details=details,
    )


def resume_endpoint(
    conn: sa.Connection, name: str, *, actor: str, now: datetime, reason: str | None = None
) -> int:
    """End a pause (or a 410 disable) and release the held jobs; returns how many. The
    reason is optional, as for every resume."""
    clean = validation.check_reason(reason, required=False)
    _update(
        conn,
        name,
        paused=False,
        paused_until=None,
        paused_reason=None,
        disabled_reason=None,
        updated_at=now,
    )
    released = release_held_jobs(conn, name, now=now)
    _audit(
        conn,
        actor=actor,
        action=AuditAction.ENDPOINT_RESUME,
        name=name,
        now=now,
        reason=clean,
        details={"released_jobs": released},
    )
    return released


def release_held_jobs(conn: sa.Connection, name: str, *, now: datetime) -> int:
    """Make the endpoint's snoozed (queued, not yet due) deliveries due now."""
    return driver(conn).release_deliveries(conn, WEBHOOK_JOB_TYPE, name, now=now)


def disable_endpoint(
    conn: sa.Connection, name: str, *, reason: str, now: datetime, actor: str = "worker"
) -> None:
    """The receiver said the endpoint is gone (410): hold everything until an operator
    resumes it."""
    clean = validation.check_reason(reason, required=False) or "disabled"
    _update(
        conn,
        name,
        paused=True,
        paused_until=None,
        paused_reason=clean,
        disabled_reason=clean,
        updated_at=now,
    )
    _audit(conn, actor=actor, action=AuditAction.ENDPOINT_DISABLE, name=name, now=now, reason=clean)


def rotate_secret(
    conn: sa.Connection,
    name: str,
    *,
    overlap: timedelta = DEFAULT_ROTATION_OVERLAP,
    now: datetime,
    actor: str = "cli",
) -> str:
    """Replace the signing secret; the old one keeps signing (as a second signature)
    for `overlap`. Returns the new secret (show it once)."""
    if overlap < timedelta(0):
        raise ValidationError("overlap", "must not be negative")
    endpoint = require_endpoint(conn, name)
    secret = generate_secret()
    expires = now + overlap
    _update(
        conn,
        name,
        secret=secret,
        previous_secret=endpoint.secret if overlap > timedelta(0) else None,
        previous_secret_expires_at=expires if overlap > timedelta(0) else None,
        updated_at=now,
    )
    _audit(
        conn,
        actor=actor,
        action=AuditAction.ENDPOINT_ROTATE_SECRET,
        name=name,
        now=now,
        details={"previous_valid_until": expires.isoformat()},
    )
    return secret
