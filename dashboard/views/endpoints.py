"""Webhook endpoints and circuit breakers: pause state, circuit state and the recent
failure rate; pause / resume an endpoint and close a breaker (admin, audited)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from flask import Blueprint, request, url_for

from jobdesk.dashboard import auth, db
from jobdesk.dashboard.flashes import note
from jobdesk.dashboard.htmx import render
from jobdesk.dashboard.navigation import back
from jobdesk.shared.core import audit
from jobdesk.shared.core.audit import AuditAction
from jobdesk.shared.core.errors import NotFoundError, ValidationError
from jobdesk.shared.limits.breakers import breaker_state, close_breaker, list_breakers
from jobdesk.shared.operator.fleet import delivery_health
from jobdesk.shared.operator.models import Role
from jobdesk.shared.operator.triage import REASON_MAX_CHARS, check_reason
from jobdesk.shared.webhooks.endpoints import list_endpoints, pause_endpoint, resume_endpoint

bp = Blueprint("endpoints", __name__)

HEALTH_WINDOW = timedelta(hours=1)
#: How long a pause may last when it is not open-ended.
PAUSE_DURATIONS: dict[str, timedelta | None] = {
    "": None,
    "15m": timedelta(minutes=15),
    "1h": timedelta(hours=1),
    "4h": timedelta(hours=4),
    "24h": timedelta(hours=24),
}
BREAKER_PREFIX = "webhook:"


@bp.get("/endpoints")
@auth.requires(Role.VIEWER)
def index() -> Any:
    with db.read() as conn:
        now = db.now(conn)
        found = list_endpoints(conn)
        breakers = {view.key: view for view in list_breakers(conn)}
        health = delivery_health(conn, [e.name for e in found], since=now - HEALTH_WINDOW)
    rows = [
        {
            "endpoint": endpoint,
            "paused": endpoint.is_paused(now),
            "breaker": breakers.get(BREAKER_PREFIX + endpoint.name),
            "health": health.get(endpoint.name),
        }
        for endpoint in found
    ]
    endpoint_keys = {BREAKER_PREFIX + e.name for e in found}
    others = [view for key, view in sorted(breakers.items()) if key not in endpoint_keys]
    return render(
        "endpoints/index.html",
        "endpoints/_table.html",
        "endpoint-table",
        rows=rows,
        other_breakers=others,
        now=now,
        durations=tuple(PAUSE_DURATIONS),
        reason_max=REASON_MAX_CHARS,
        window=HEALTH_WINDOW,
    )


def _fallback() -> str:
    return url_for("jobdesk.endpoints.index")


@bp.post("/endpoints/<name>/pause")
@auth.requires(Role.ADMIN)
def pause(name: str) -> Any:
    try:
        reason = check_reason(request.form.get("reason"), required=True)
        duration_key = request.form.get("duration", "")
        if duration_key not in PAUSE_DURATIONS:
            raise ValidationError("duration", f"must be one of {', '.join(PAUSE_DURATIONS)}")
        with db.write() as conn:
            now = db.now(conn)
            duration = PAUSE_DURATIONS[duration_key]
            pause_endpoint(
                conn,
                name,
                actor=auth.actor(),
                reason=reason,
                until=now + duration if duration else None,
                now=now,
            )
    except ValidationError as exc:
        note(f"Endpoint not paused: the {exc.field} {exc.message}", "error")
        return back(_fallback())
    except NotFoundError as exc:
        note(f"Endpoint not paused: {exc}", "error")
        return back(_fallback())
    note(f"Paused endpoint {name}; its deliveries wait without using attempts.", "success")
    return back(_fallback())


@bp.post("/endpoints/<name>/resume")
@auth.requires(Role.ADMIN)
def resume(name: str) -> Any:
    try:
        with db.write() as conn:
            released = resume_endpoint(conn, name, actor=auth.actor(), now=db.now(conn))
    except NotFoundError as exc:
        note(f"Endpoint not resumed: {exc}", "error")
        return back(_fallback())
    note(f"Resumed endpoint {name}; released {released:,} waiting deliveries.", "success")
    return back(_fallback())


@bp.post("/breakers/close")
@auth.requires(Role.ADMIN)
def close() -> Any:
    key = (request.form.get("key") or "").strip()
    with db.write() as conn:
        now = db.now(conn)
        known = {view.key for view in list_breakers(conn)}
        if key not in known:
            note("No circuit breaker with that key.", "error")
            return back(_fallback())
        before = breaker_state(conn, key, now)
        close_breaker(conn, key, now)
        audit.record(
            conn,
            actor=auth.actor(),
            action=AuditAction.BREAKER_CLOSE,
            subject=key,
            now=now,
            details={"was": before.state, "consecutive_failures": before.consecutive_failures},
        )
    note(f"Closed circuit breaker {key}; attempts flow again.", "success")
    return back(_fallback())
