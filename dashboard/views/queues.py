"""Queues: per queue the jobs by state, the oldest waiting, what finished and failed in
the last 5 and 60 minutes, the live workers serving it; pause / resume with a reason
(operator, audited). A paused queue is skipped by every worker's claim."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Blueprint, request, url_for

from jobdesk.dashboard import auth, db
from jobdesk.dashboard.flashes import note
from jobdesk.dashboard.htmx import render
from jobdesk.dashboard.navigation import back
from jobdesk.dashboard.refresh import chosen_refresh
from jobdesk.dashboard.state import get_state
from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.core.queues import pause_queue, resume_queue
from jobdesk.shared.core.states import JobStatus
from jobdesk.shared.operator.models import Role
from jobdesk.shared.operator.queues import queue_summaries
from jobdesk.shared.operator.triage import REASON_MAX_CHARS

bp = Blueprint("queues", __name__)

#: Columns of the state counts, in lifecycle order.
SHOWN_STATES = [str(s) for s in JobStatus]


@bp.get("/queues")
@auth.requires(Role.VIEWER)
def index() -> Any:
    with db.read() as conn:
        now = db.now(conn)
        summaries = queue_summaries(conn, now=now, live_since=now - get_state().worker_stale_after)
    return render(
        "queues/index.html",
        "queues/_table.html",
        "queue-table",
        queues=summaries,
        states=SHOWN_STATES,
        now=now,
        refresh=chosen_refresh(),
        reason_max=REASON_MAX_CHARS,
    )


def _fallback() -> str:
    return url_for("jobdesk.queues.index")


def _act(name: str, verb: str, change: Callable[..., Any], done: str) -> Any:
    """Pause or resume queue `name` with the form's reason; the outcome as a flash."""
    try:
        with db.write() as conn:
            change(conn, name, actor=auth.actor(), reason=request.form.get("reason"),
                   now=db.now(conn))  # fmt: skip
    except ValidationError as exc:
        note(f"Queue {name} not {verb}: the {exc.field} {exc.message}", "error")
        return back(_fallback())
    note(done, "success")
    return back(_fallback())


@bp.post("/queues/<name>/pause")
@auth.requires(Role.OPERATOR)
def pause(name: str) -> Any:
    return _act(
        name, "paused", pause_queue,
        f"Paused queue {name}: no worker claims its jobs until it is resumed.",
    )  # fmt: skip


@bp.post("/queues/<name>/resume")
@auth.requires(Role.OPERATOR)
def resume(name: str) -> Any:
    return _act(
        name, "resumed", resume_queue, f"Resumed queue {name}; workers claim its jobs again."
    )
