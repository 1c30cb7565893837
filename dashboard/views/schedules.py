"""Schedules: the recurring jobs with their expression in words, next run in the
schedule's own time zone (and on the viewer's clock when theirs differs), the last runs
and their outcome; pause / resume / run now (operator, audited)."""

from __future__ import annotations

from typing import Any
from zoneinfo import ZoneInfo

from flask import Blueprint, request

from jobdesk.dashboard import auth, db
from jobdesk.dashboard.actions import Done, action
from jobdesk.dashboard.htmx import render
from jobdesk.dashboard.viewer_zone import viewer_zone
from jobdesk.shared.operator.commands.triage import REASON_MAX_CHARS
from jobdesk.shared.operator.models import Role
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


@bp.post("/schedules/<name>/pause")
@auth.requires(Role.OPERATOR)
@action("jobdesk.schedules.index", refused=lambda name: f"Schedule {name} not paused")
def pause_schedule(name: str) -> Done:
    with db.write() as conn:
        pause(conn, name, actor=auth.actor(), reason=request.form.get("reason"), now=db.now(conn))
    return Done(f"Paused schedule {name}; it fires again when resumed.")


@bp.post("/schedules/<name>/resume")
@auth.requires(Role.OPERATOR)
@action("jobdesk.schedules.index", refused=lambda name: f"Schedule {name} not resumed")
def resume_schedule(name: str) -> Done:
    with db.write() as conn:
        done = resume(conn, name, actor=auth.actor(), now=db.now(conn))
    next_run = local_text(done.next_run_at, viewer_zone().zone, seconds=False)
    return Done(f"Resumed schedule {name}; next run {next_run}.")


@bp.post("/schedules/<name>/run")
@auth.requires(Role.OPERATOR)
@action("jobdesk.schedules.index", refused=lambda name: f"Schedule {name} not run")
def run_schedule(name: str) -> Done:
    with db.write() as conn:
        job_id = run_now(conn, name, actor=auth.actor(), now=db.now(conn))
    return Done(f"Enqueued job #{job_id} for schedule {name}.")
