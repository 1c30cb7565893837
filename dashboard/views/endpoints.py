"""Webhook endpoints and circuit breakers: pause state, circuit state and the recent
failure rate; pause / resume an endpoint and close a breaker (admin, audited)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from flask import Blueprint, request

from jobdesk.dashboard import auth, db
from jobdesk.dashboard.actions import Done, action
from jobdesk.dashboard.htmx import render
from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.limits.breakers import close_breaker_for, list_breakers
from jobdesk.shared.operator.commands.triage import REASON_MAX_CHARS, check_reason
from jobdesk.shared.operator.models import Role
from jobdesk.shared.operator.queries.fleet import delivery_health
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


@bp.post("/endpoints/<name>/pause")
@auth.requires(Role.ADMIN)
@action("jobdesk.endpoints.index", refused="Endpoint not paused")
def pause(name: str) -> Done:
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
    return Done(f"Paused endpoint {name}; its deliveries wait without using attempts.")


@bp.post("/endpoints/<name>/resume")
@auth.requires(Role.ADMIN)
@action("jobdesk.endpoints.index", refused="Endpoint not resumed")
def resume(name: str) -> Done:
    with db.write() as conn:
        released = resume_endpoint(conn, name, actor=auth.actor(), now=db.now(conn))
    return Done(f"Resumed endpoint {name}; released {released:,} waiting deliveries.")


@bp.post("/breakers/close")
@auth.requires(Role.ADMIN)
@action("jobdesk.endpoints.index", refused="Circuit breaker not closed")
def close() -> Done:
    key = (request.form.get("key") or "").strip()
    with db.write() as conn:
        close_breaker_for(conn, key, actor=auth.actor(), now=db.now(conn))
    return Done(f"Closed circuit breaker {key}; attempts flow again.")
