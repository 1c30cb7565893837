"""Schedules: the recurring jobs with their expression in words, next run in the
schedule's own time zone (and on the viewer's clock when theirs differs), the last runs
and their outcome; pause / resume / run now (operator, audited)."""

from __future__ import annotations

from typing import Any
from zoneinfo import ZoneInfo

from flask import Blueprint, request, url_for

from jobdesk.dashboard import auth, db
from jobdesk.dashboard.flashes import note
from jobdesk.dashboard.htmx import render
from jobdesk.dashboard.navigation import back
from jobdesk.dashboard.viewer_zone import viewer_zone
from jobdesk.shared.core.errors import NotFoundError, ValidationError
from jobdesk.shared.operator.models import Role
from jobdesk.shared.operator.triage import REASON_MAX_CHARS
from jobdesk.shared.operator.zones import local_text
from jobdesk.shared.schedules.store import list_schedules, pause, recent_runs, resume, run_now

bp = Blueprint("schedules", __name__)


@bp.get("/schedules")
@auth.requires(Role.VIEWER)
def index() -> Any:
    with db.read() as conn:
        now = db.now(conn)
        rows = [
            {
                "schedule": schedule,
                "local_next": schedule.next_run_at.astimezone(ZoneInfo(schedule.timezone)),
                "runs": recent_runs(conn, schedule.name),
                # The viewer's own clock beside the schedule's, when they differ.
                "viewer_differs": viewer_zone().name != schedule.timezone,
            }
            for schedule in list_schedules(conn)
        ]
    return render(
        "schedules/index.html",
        "schedules/_table.html",
        "schedule-table",
        rows=rows,
        now=now,
        reason_max=REASON_MAX_CHARS,
    )


def _fallback() -> str:
    return url_for("jobdesk.schedules.index")


def _act(name: str, verb: str, action: Any) -> Any:
    try:
        with db.write() as conn:
            done = action(conn, db.now(conn))
    except (ValidationError, NotFoundError) as exc:
        detail = f"the {exc.field} {exc.message}" if isinstance(exc, ValidationError) else exc
        note(f"Schedule {name} not {verb}: {detail}", "error")
        return None
    return done


@bp.post("/schedules/<name>/pause")
@auth.requires(Role.OPERATOR)
def pause_schedule(name: str) -> Any:
    reason = request.form.get("reason")
    done = _act(
        name,
        "paused",
        lambda conn, now: pause(conn, name, actor=auth.actor(), reason=reason, now=now),
    )
    if done is not None:
        note(f"Paused schedule {name}; it fires again when resumed.", "success")
    return back(_fallback())


@bp.post("/schedules/<name>/resume")
@auth.requires(Role.OPERATOR)
def resume_schedule(name: str) -> Any:
    done = _act(name, "resumed", lambda conn, now: resume(conn, name, actor=auth.actor(), now=now))
    if done is not None:
        next_run = local_text(done.next_run_at, viewer_zone().zone, seconds=False)
        note(f"Resumed schedule {name}; next run {next_run}.", "success")
    return back(_fallback())


@bp.post("/schedules/<name>/run")
@auth.requires(Role.OPERATOR)
def run_schedule(name: str) -> Any:
    done = _act(name, "run", lambda conn, now: run_now(conn, name, actor=auth.actor(), now=now))
    if done is not None:
        note(f"Enqueued job #{done} for schedule {name}.", "success")
    return back(_fallback())
