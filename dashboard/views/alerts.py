"""Alerts raised by the maintenance checks: open and resolved, each acknowledgeable with
a note (operator role, audited). The page polls `news` for alerts raised since it was
rendered rather than reloading rows an operator may be typing a note into."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, request, url_for

from jobdesk.dashboard import auth, db
from jobdesk.dashboard.actions import Done, action
from jobdesk.dashboard.htmx import render
from jobdesk.dashboard.refresh import chosen_refresh
from jobdesk.shared.alerts import store as alert_store
from jobdesk.shared.alerts.models import AlertStatus
from jobdesk.shared.core.errors import NotFoundError, ValidationError
from jobdesk.shared.operator.commands.triage import REASON_MAX_CHARS, check_reason
from jobdesk.shared.operator.filters import parse_positive_int
from jobdesk.shared.operator.models import Role
from jobdesk.shared.operator.queries.live import new_alerts, newest_alert_id

bp = Blueprint("alerts", __name__)
STATUSES = tuple(AlertStatus)


@bp.get("/alerts")
@auth.requires(Role.VIEWER)
def index() -> Any:
    status = request.args.get("status", "open")
    if status not in STATUSES:
        raise ValidationError("status", "must be open or resolved")
    refresh = chosen_refresh()
    with db.read() as conn:
        now = db.now(conn)
        newest = newest_alert_id(conn)  # before the list: a new alert is never missed
        rows = alert_store.list_alerts(conn, status=status, limit=200)
        open_count = alert_store.count_open_alerts(conn)
    news_args: dict[str, Any] = {"status": status}
    if newest:
        news_args["newer_than"] = str(newest)
    return render(
        "alerts/index.html",
        "alerts/_list.html",
        "alert-list",
        alerts=rows,
        status=status,
        open_count=open_count,
        now=now,
        reason_max=REASON_MAX_CHARS,
        refresh=refresh,
        news_url=url_for("jobdesk.alerts.news", **news_args),
    )


@bp.get("/alerts/news")
@auth.requires(Role.VIEWER)
def news() -> Any:
    """How many alerts in the page's tab were raised after it was rendered."""
    status = request.args.get("status", "open")
    if status not in STATUSES:
        raise ValidationError("status", "must be open or resolved")
    newer_than = parse_positive_int("newer_than", request.args.get("newer_than")) or 0
    with db.read() as conn:
        found = new_alerts(conn, status, newer_than)
    return render(
        "layout/_news.html",
        found=found,
        noun="alert",
        show_url=url_for("jobdesk.alerts.index", status=status),
    )


@bp.post("/alerts/<jobdesk_id:alert_id>/acknowledge")
@auth.requires(Role.OPERATOR)
@action("jobdesk.alerts.index", refused="Not acknowledged")
def acknowledge(alert_id: int) -> Done:
    try:
        text = check_reason(request.form.get("note"), required=True)
    except ValidationError as exc:
        raise ValidationError("note", exc.message) from exc
    with db.write() as conn:
        found = alert_store.acknowledge_alert(
            conn, alert_id, actor=auth.actor(), note=text or "", now=db.now(conn)
        )
    if not found:
        raise NotFoundError(f"alert #{alert_id} does not exist")
    return Done(f"Acknowledged alert #{alert_id}.")
