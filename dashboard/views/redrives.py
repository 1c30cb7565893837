"""Paced redrives: the form that starts one on an error group or a filtered dead-letter
list ("Redrive slowly…", after a preview of what it takes on), the list of redrives with
their progress, one redrive's page, and pause / resume / cancel (operator, audited).

The list and a redrive's page refresh at the operator's chosen interval while something
is at work; the action forms are part of what refreshes (a redrive that stopped by
itself loses its buttons), and a poll is skipped while the operator types a reason."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, render_template, request, url_for

from jobdesk.dashboard import auth, db
from jobdesk.dashboard.actions import Done, action
from jobdesk.dashboard.forms import request_filters
from jobdesk.dashboard.htmx import render, wants_fragment
from jobdesk.dashboard.navigation import safe_target
from jobdesk.dashboard.refresh import chosen_refresh
from jobdesk.dashboard.templating import plural
from jobdesk.shared.core.errors import NotFoundError, ValidationError
from jobdesk.shared.core.validation import REASON_MAX_CHARS
from jobdesk.shared.operator.filters import JobFilters, parse_positive_int
from jobdesk.shared.operator.models import Role
from jobdesk.shared.redrives.commands import (
    cancel_redrive,
    pause_redrive,
    resume_redrive,
    start_redrive,
)
from jobdesk.shared.redrives.models import MAX_RATE_PER_MINUTE, MAX_STOP_WINDOW
from jobdesk.shared.redrives.queries import (
    PAGE,
    RedriveView,
    failed_again,
    get_redrive,
    list_redrives,
)
from jobdesk.shared.redrives.rules import DEFAULT_RATE_PER_MINUTE, StopRule, parse_rate
from jobdesk.shared.redrives.selection import preview_redrive

bp = Blueprint("redrives", __name__)

#: The part of a redrive's page that refreshes (its progress, facts and actions).
SUMMARY = "redrive-summary"
#: htmx stops polling an element when the response status is 286.
STOP_POLLING = 286


@bp.get("/redrives")
@auth.requires(Role.VIEWER)
def index() -> Any:
    before = parse_positive_int("before", request.args.get("before"))
    refresh = chosen_refresh()
    with db.read() as conn:
        now = db.now(conn)
        found = list_redrives(conn, before_id=before, limit=PAGE + 1)
    shown = found[:PAGE]
    return render(
        "redrives/index.html",
        "redrives/_table.html",
        "redrive-table",
        redrives=shown,
        before=before,
        older=shown[-1].id if len(found) > PAGE else None,
        refresh=refresh,
        reason_max=REASON_MAX_CHARS,
        now=now,
    )


def _filters_of(args: Any) -> JobFilters:
    """The dead-letter filters a redrive form carries (a time range means "went dead
    within", as on the dead-letter page)."""
    filters = request_filters(args)
    if filters.range is not None or filters.since is not None or filters.until is not None:
        return JobFilters.from_args({**filters.to_args(), "time": "finished"})
    return filters


@bp.get("/redrives/new")
@auth.requires(Role.OPERATOR)
def new() -> Any:
    """What a redrive of these filters would take on, and the form to start it."""
    filters = _filters_of(request.args)
    with db.read() as conn:
        now = db.now(conn)
        preview = preview_redrive(conn, filters, now=now)
    return render(
        "redrives/new.html",
        preview=preview,
        filter_args=filters.to_args(),
        rate=DEFAULT_RATE_PER_MINUTE,
        rule=StopRule(),
        max_rate=MAX_RATE_PER_MINUTE,
        max_window=MAX_STOP_WINDOW,
        reason_max=REASON_MAX_CHARS,
        next=safe_target(request.args.get("next"), ""),
        now=now,
    )


def _whole(name: str, raw: str | None) -> int:
    value = parse_positive_int(name, (raw or "").strip() or None, maximum=MAX_STOP_WINDOW)
    if value is None:
        raise ValidationError(name, "is required")
    return value


def _redrive_url(redrive_id: int) -> str:
    return url_for("jobdesk.redrives.detail", redrive_id=redrive_id)


@bp.post("/redrives")
@auth.requires(Role.OPERATOR)
@action("jobdesk.redrives.index", refused="Redrive not started")
def start() -> Done:
    filters = _filters_of(request.form)
    rate = parse_rate(request.form.get("rate"))
    rule = StopRule(
        _whole("stop_failures", request.form.get("stop_failures")),
        _whole("stop_window", request.form.get("stop_window")),
    )
    with db.write() as conn:
        redrive_id = start_redrive(
            conn,
            filters,
            rate_per_minute=rate,
            stop_rule=rule,
            actor=auth.actor(),
            reason=request.form.get("reason"),
            now=db.now(conn),
        )
        started = get_redrive(conn, redrive_id)
    assert started is not None  # written a moment ago, in this transaction
    return Done(
        f"Started redrive #{redrive_id}: {plural(started.total, 'dead job')} at "
        f"{rate:,} per minute, stopping if {rule} new jobs fail again.",
        to=_redrive_url(redrive_id),
    )


def _found(found: RedriveView | None, redrive_id: int) -> RedriveView:
    if found is None:
        raise NotFoundError(f"redrive #{redrive_id} does not exist")
    return found


@bp.get("/redrives/<jobdesk_id:redrive_id>")
@auth.requires(Role.VIEWER)
def detail(redrive_id: int) -> Any:
    refresh = chosen_refresh()
    with db.read() as conn:
        now = db.now(conn)
        redrive = _found(get_redrive(conn, redrive_id), redrive_id)
        failing = failed_again(conn, redrive_id)
    context = {
        "redrive": redrive,
        "failing": failing,
        "reason_max": REASON_MAX_CHARS,
        "now": now,
    }
    if wants_fragment(SUMMARY):
        # A refresh of the progress: polling stops once the redrive has ended.
        body = render_template("redrives/_summary.html", **context)
        status = 200 if redrive.active else STOP_POLLING
        return Response(body, status=status, mimetype="text/html")
    return render("redrives/detail.html", **context, refresh=refresh)


def _refused(verb: str) -> Any:
    return lambda redrive_id: f"Redrive #{redrive_id} not {verb}"


def _change(command: Any, redrive_id: int) -> None:
    """Run a redrive command (pause, resume, cancel) as the signed-in operator."""
    with db.write() as conn:
        command(
            conn, redrive_id, actor=auth.actor(), reason=request.form.get("reason"),
            now=db.now(conn),
        )  # fmt: skip


@bp.post("/redrives/<jobdesk_id:redrive_id>/pause")
@auth.requires(Role.OPERATOR)
@action(_redrive_url, refused=_refused("paused"))
def pause(redrive_id: int) -> Done:
    _change(pause_redrive, redrive_id)
    return Done(f"Paused redrive #{redrive_id}: nothing more is requeued until it is resumed.")


@bp.post("/redrives/<jobdesk_id:redrive_id>/resume")
@auth.requires(Role.OPERATOR)
@action(_redrive_url, refused=_refused("resumed"))
def resume(redrive_id: int) -> Done:
    _change(resume_redrive, redrive_id)
    return Done(f"Resumed redrive #{redrive_id} at its pace.")


@bp.post("/redrives/<jobdesk_id:redrive_id>/cancel")
@auth.requires(Role.OPERATOR)
@action(_redrive_url, refused=_refused("cancelled"))
def cancel(redrive_id: int) -> Done:
    _change(cancel_redrive, redrive_id)
    return Done(
        f"Cancelled redrive #{redrive_id}: the dead jobs it had not reached stay dead, "
        "waiting for a decision."
    )
