"""Batches: the list (newest first, progress from each batch's counters, its callbacks)
and one batch's page — its children by status, page by page, the graph of the `after=`
chains among them, "retry all dead children" (the dead-letter bulk preview, filtered to
the batch) and "cancel batch" with a reason (operator, audited as `batch.cancel`).

Both pages refresh their progress at the operator's chosen interval: the list swaps its
table, a batch's page only its summary (the children list and the forms stay put)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, render_template, request, url_for

from jobdesk.dashboard import auth, db
from jobdesk.dashboard.actions import Done, Refused, action
from jobdesk.dashboard.graphs import layout
from jobdesk.dashboard.htmx import render, wants_fragment
from jobdesk.dashboard.refresh import chosen_refresh
from jobdesk.dashboard.statuses import SHOWN_STATUSES
from jobdesk.dashboard.templating import plural
from jobdesk.shared.core.errors import NotFoundError, ValidationError
from jobdesk.shared.operator.commands.triage import REASON_MAX_CHARS, check_reason
from jobdesk.shared.operator.filters import parse_positive_int
from jobdesk.shared.operator.models import Role
from jobdesk.shared.operator.queries.live import row_states
from jobdesk.shared.workflows.batch_cancel import cancel_batch
from jobdesk.shared.workflows.queries import (
    CHILDREN_PAGE,
    GRAPH_LIMIT,
    PAGE,
    BatchDetail,
    batch_children,
    dependency_graph,
    get_batch,
    graph_members,
    list_batches,
    undecided_dead,
)

bp = Blueprint("batches", __name__)

#: The summary a batch's page refreshes (its progress and counts).
SUMMARY = "batch-summary"
#: htmx stops polling an element when the response status is 286.
STOP_POLLING = 286


@bp.get("/batches")
@auth.requires(Role.VIEWER)
def index() -> Any:
    before = parse_positive_int("before", request.args.get("before"))
    refresh = chosen_refresh()
    with db.read() as conn:
        now = db.now(conn)
        # One more than a page: whether an older page exists.
        found = list_batches(conn, before_id=before, limit=PAGE + 1)
        shown = found[:PAGE]
        callback_ids = [
            job_id
            for batch in shown
            for job_id in (batch.on_success_job_id, batch.on_finish_job_id)
            if job_id is not None
        ]
        callbacks = {state.id: state for state in row_states(conn, callback_ids)}
    return render(
        "batches/index.html",
        "batches/_table.html",
        "batch-table",
        batches=shown,
        callbacks=callbacks,
        before=before,
        older=shown[-1].id if len(found) > PAGE else None,
        refresh=refresh,
        now=now,
    )


def _status_filter() -> str | None:
    status = request.args.get("status") or None
    if status is not None and status not in SHOWN_STATUSES:
        raise ValidationError("status", f"must be one of {', '.join(SHOWN_STATUSES)}")
    return status


def _found(found: BatchDetail | None, batch_id: int) -> BatchDetail:
    if found is None:
        raise NotFoundError(f"batch #{batch_id} does not exist")
    return found


@bp.get("/batches/<jobdesk_id:batch_id>")
@auth.requires(Role.VIEWER)
def detail(batch_id: int) -> Any:
    status = _status_filter()
    after = parse_positive_int("after", request.args.get("after")) or 0
    refresh = chosen_refresh()
    with db.read() as conn:
        now = db.now(conn)
        found = _found(get_batch(conn, batch_id), batch_id)
        summary = {"found": found, "batch": found.batch, "statuses": SHOWN_STATUSES, "now": now}
        if wants_fragment(SUMMARY):
            # A refresh of the progress: the rest of the page is not read again, and
            # polling stops once every child is final.
            body = render_template("batches/_summary.html", **summary)
            done = found.batch.unfinished == 0
            return Response(body, status=STOP_POLLING if done else 200, mimetype="text/html")
        children = batch_children(
            conn, batch_id, status=status, after_id=after, limit=CHILDREN_PAGE + 1
        )
        members = graph_members(conn, batch_id, limit=GRAPH_LIMIT + 1)
        graph = layout(
            dependency_graph(conn, members[:GRAPH_LIMIT]),
            limit=GRAPH_LIMIT,
            more=len(members) > GRAPH_LIMIT,
        )
        dead = undecided_dead(conn, batch_id)
    return render(
        "batches/detail.html",
        **summary,
        status=status,
        after=after,
        children=children[:CHILDREN_PAGE],
        next_after=children[CHILDREN_PAGE - 1]["id"] if len(children) > CHILDREN_PAGE else None,
        graph=graph,
        undecided_dead=dead,
        refresh=refresh,
        reason_max=REASON_MAX_CHARS,
    )


def _batch_url(batch_id: int) -> str:
    return url_for("jobdesk.batches.detail", batch_id=batch_id)


@bp.post("/batches/<jobdesk_id:batch_id>/cancel")
@auth.requires(Role.OPERATOR)
@action(
    _batch_url,
    refused=lambda batch_id: f"Batch #{batch_id} not cancelled",
    catches=(ValidationError,),
)
def cancel(batch_id: int) -> Done:
    reason = check_reason(request.form.get("reason"), required=True)
    assert reason is not None
    with db.write() as conn:
        batch = _found(get_batch(conn, batch_id), batch_id).batch
        if batch.state != "running":
            # Only a batch with unfinished children can be cancelled; a second click (or
            # a second operator) changes nothing.
            raise Refused(
                f"Nothing changed: batch #{batch_id} is already {batch.state}.", category="info"
            )
        done = cancel_batch(conn, batch_id, actor=auth.actor(), reason=reason, now=db.now(conn))
    parts = [f"Cancelled batch #{batch_id}: {plural(len(done['cancelled']), 'job')} cancelled"]
    if done["asked"]:
        parts.append(f", {plural(len(done['asked']), 'running job')} asked to stop")
    parts.append(".")
    if batch.on_finish_job_id is not None:
        parts.append(
            f" Its on_finish callback (job #{batch.on_finish_job_id}) runs once every "
            "child is final."
        )
    return Done("".join(parts))
