"""Queues: per queue the jobs by state, the oldest waiting, what finished and failed in
the last 5 and 60 minutes, the live workers serving it; pause / resume with a reason
(operator, audited). A paused queue is skipped by every worker's claim."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Blueprint, request

from jobdesk.dashboard import auth, db
from jobdesk.dashboard.actions import Done, action
from jobdesk.dashboard.htmx import render
from jobdesk.dashboard.refresh import chosen_refresh
from jobdesk.dashboard.state import get_state
from jobdesk.dashboard.statuses import SHOWN_STATUSES
from jobdesk.shared.core.queues import pause_queue, resume_queue
from jobdesk.shared.operator.commands.triage import REASON_MAX_CHARS
from jobdesk.shared.operator.models import Role
from jobdesk.shared.operator.queries.queues import queue_summaries

bp = Blueprint("queues", __name__)

#: Columns of the state counts, in lifecycle order.
SHOWN_STATES = SHOWN_STATUSES


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


def _change(name: str, change: Callable[..., Any]) -> None:
    """Pause or resume queue `name` with the form's reason."""
    with db.write() as conn:
        change(conn, name, actor=auth.actor(), reason=request.form.get("reason"),
               now=db.now(conn))  # fmt: skip


@bp.post("/queues/<name>/pause")
@auth.requires(Role.OPERATOR)
@action("jobdesk.queues.index", refused=lambda name: f"Queue {name} not paused")
def pause(name: str) -> Done:
    _change(name, pause_queue)
    return Done(f"Paused queue {name}: no worker claims its jobs until it is resumed.")


@bp.post("/queues/<name>/resume")
@auth.requires(Role.OPERATOR)
@action("jobdesk.queues.index", refused=lambda name: f"Queue {name} not resumed")
def resume(name: str) -> Done:
    _change(name, resume_queue)
    return Done(f"Resumed queue {name}; workers claim its jobs again.")
