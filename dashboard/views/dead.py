"""Dead letters grouped by error fingerprint (count, first/last seen, types, a sample
error), with the hourly trend, and the bulk-action preview that comes before any bulk
retry or ignore. The page polls `news` for jobs that went dead since it was rendered
("2 new since you loaded — show") instead of regrouping under the cursor."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from flask import Blueprint, request, url_for

from jobdesk.dashboard import auth, db
from jobdesk.dashboard.flashes import note
from jobdesk.dashboard.forms import parse_bulk_selection, request_filters
from jobdesk.dashboard.htmx import render
from jobdesk.dashboard.navigation import back, safe_target
from jobdesk.dashboard.refresh import chosen_refresh
from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.operator.commands.triage import BULK_CAP, REASON_MAX_CHARS, preview_bulk
from jobdesk.shared.operator.filters import RANGES, parse_time
from jobdesk.shared.operator.models import Role
from jobdesk.shared.operator.queries.dead_letters import dead_groups, dead_trend
from jobdesk.shared.operator.queries.live import new_dead

bp = Blueprint("dead", __name__)

BULK_ACTIONS = ("retry", "ignore")


@bp.get("/dead")
@auth.requires(Role.VIEWER)
def index() -> Any:
    # On this page a time range means "went dead within", i.e. by finish time.
    filters = replace(request_filters(request.args), time_field="finished")
    refresh = chosen_refresh()
    with db.read() as conn:
        now = db.now(conn)
        found = dead_groups(conn, filters, now=now)
        trend = dead_trend(conn, now=now)
    args: dict[str, Any] = filters.to_args()
    return render(
        "dead/index.html",
        "dead/_groups.html",
        "dead-groups",
        filters=filters,
        args=args,
        refresh=refresh,
        news_url=url_for("jobdesk.dead.news", seen_at=now.isoformat(), **args),
        filtered=not replace(filters, time_field="created").is_empty,
        found=found,
        trend=trend,
        trend_total=sum(b.count for b in trend),
        ranges=tuple(RANGES),
        now=now,
    )


@bp.get("/dead/news")
@auth.requires(Role.VIEWER)
def news() -> Any:
    """How many jobs matching the page's filters went dead after it was rendered."""
    filters = replace(request_filters(request.args), time_field="finished")
    seen_at = parse_time("seen_at", request.args.get("seen_at"))
    if seen_at is None:
        raise ValidationError("seen_at", "is required: the time the page was rendered")
    with db.read() as conn:
        found = new_dead(conn, filters, seen_at, now=db.now(conn))
    args: dict[str, Any] = filters.to_args()
    return render(
        "layout/_news.html",
        found=found,
        noun="dead job",
        show_url=url_for("jobdesk.dead.index", **args),
    )


@bp.get("/dead/bulk")
@auth.requires(Role.OPERATOR)
def bulk_preview() -> Any:
    action = request.args.get("action")
    if action not in BULK_ACTIONS:
        raise ValidationError("action", f"must be one of {', '.join(BULK_ACTIONS)}")
    came_from = safe_target(request.args.get("next"), "")
    nothing_ticked = request.args.get("scope") != "all" and not any(request.args.getlist("ids"))
    if came_from and nothing_ticked:
        # "Retry selected" with no box ticked: say so on the list it came from (a URL
        # typed without `next` gets the plain error page naming the problem).
        verb = "Retry" if action == "retry" else "Ignore"
        note(
            f"Nothing selected: tick the jobs to act on, then press {verb} selected again.", "error"
        )
        return back(url_for("jobdesk.dead.index"))
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
