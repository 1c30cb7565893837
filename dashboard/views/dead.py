"""Dead letters grouped by error fingerprint (count, first/last seen, types, a sample
error), with the hourly trend, and the bulk-action preview that comes before any bulk
retry or ignore."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from flask import Blueprint, request

from jobdesk.dashboard import auth, db
from jobdesk.dashboard.forms import parse_bulk_selection
from jobdesk.dashboard.htmx import render
from jobdesk.dashboard.navigation import safe_target
from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.operator.dead_letters import dead_groups, dead_trend
from jobdesk.shared.operator.filters import RANGES, JobFilters
from jobdesk.shared.operator.models import Role
from jobdesk.shared.operator.triage import BULK_CAP, REASON_MAX_CHARS, preview_bulk

bp = Blueprint("dead", __name__)

BULK_ACTIONS = ("retry", "ignore")


@bp.get("/dead")
@auth.requires(Role.VIEWER)
def index() -> Any:
    # On this page a time range means "went dead within", i.e. by finish time.
    filters = replace(JobFilters.from_args(request.args), time_field="finished")
    with db.read() as conn:
        now = db.now(conn)
        found = dead_groups(conn, filters, now=now)
        trend = dead_trend(conn, now=now)
    return render(
        "dead/index.html",
        "dead/_groups.html",
        "dead-groups",
        filters=filters,
        args=filters.to_args(),
        filtered=not replace(filters, time_field="created").is_empty,
        found=found,
        trend=trend,
        trend_peak=max((b.count for b in trend), default=0),
        trend_total=sum(b.count for b in trend),
        ranges=tuple(RANGES),
        now=now,
    )


@bp.get("/dead/bulk")
@auth.requires(Role.OPERATOR)
def bulk_preview() -> Any:
    action = request.args.get("action")
    if action not in BULK_ACTIONS:
        raise ValidationError("action", f"must be one of {', '.join(BULK_ACTIONS)}")
    selection = parse_bulk_selection(request.args, with_range=False)
    with db.read() as conn:
        now = db.now(conn)
        impact = preview_bulk(conn, selection, now=now)
    return render(
        "dead/bulk_preview.html",
        action=action,
        selection=selection,
        impact=impact,
        filter_args=selection.filters.to_args() if selection.filters else {},
        cap=BULK_CAP,
        reason_max=REASON_MAX_CHARS,
        next=safe_target(request.args.get("next"), ""),
        now=now,
    )
