"""Triage actions — retry, fix & retry, ignore, cancel (a queued, retrying or running
job; or every job matching a filter, after a preview), bulk. Each is a POST that answers
303 to the page the operator acted from (filters kept) with a counted flash message; a
lost race (another operator acted first) reloads the job with the reason."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from flask import Blueprint, render_template, request, url_for

from jobdesk.dashboard import auth, db
from jobdesk.dashboard.actions import Done, Refused, action
from jobdesk.dashboard.forms import parse_bulk_selection, parse_payload_text
from jobdesk.dashboard.htmx import render
from jobdesk.dashboard.navigation import safe_target
from jobdesk.dashboard.state import get_state
from jobdesk.dashboard.templating import plural
from jobdesk.shared.core.errors import ConflictError, ValidationError
from jobdesk.shared.core.masking import mask_payload
from jobdesk.shared.core.payload_checks import PayloadErrors
from jobdesk.shared.operator.commands import cancellation, triage
from jobdesk.shared.operator.commands.triage import REASON_MAX_CHARS
from jobdesk.shared.operator.filters import JobFilters, parse_positive_int
from jobdesk.shared.operator.models import Role
from jobdesk.shared.operator.queries.jobs import job_detail

bp = Blueprint("actions", __name__)


def _job_url(job_id: int) -> str:
    return url_for("jobdesk.jobs.detail", job_id=job_id)


@contextmanager
def _lost_race() -> Iterator[None]:
    """Another operator acted first: nothing changed, and the job's page says why."""
    try:
        yield
    except ConflictError as exc:
        raise Refused(f"Nothing changed: {exc}. The page shows the current state.") from exc


@bp.post("/jobs/<jobdesk_id:job_id>/retry")
@auth.requires(Role.OPERATOR)
@action(_job_url, refused="Not retried", catches=())
def retry(job_id: int) -> Done:
    try:
        with _lost_race(), db.write() as conn:
            new_id = triage.retry_dead(
                conn,
                job_id,
                actor=auth.actor(),
                reason=request.form.get("reason"),
                now=db.now(conn),
            )
    except ValidationError as exc:  # its message reads whole (an unknown job type)
        raise Refused(f"Not retried: {exc.message}") from exc
    return Done(
        f"Requeued job #{job_id} as new job #{new_id}.",
        href=_job_url(new_id),
        link=f"Open job #{new_id}",
    )


@bp.post("/jobs/<jobdesk_id:job_id>/ignore")
@auth.requires(Role.OPERATOR)
@action(_job_url, refused="Not ignored", catches=(ValidationError,))
def ignore(job_id: int) -> Done:
    with _lost_race(), db.write() as conn:
        triage.ignore_dead(
            conn, job_id, actor=auth.actor(), reason=request.form.get("reason"), now=db.now(conn)
        )
    return Done(f"Ignored job #{job_id}; it stays findable under dead letters → ignored.")


@bp.post("/jobs/<jobdesk_id:job_id>/cancel")
@auth.requires(Role.OPERATOR)
@action(_job_url, refused="Not cancelled", catches=(ValidationError,))
def cancel_job(job_id: int) -> Done:
    try:
        with db.write() as conn:
            done = cancellation.cancel_job(
                conn,
                job_id,
                actor=auth.actor(),
                reason=request.form.get("reason"),
                now=db.now(conn),
            )
    except ConflictError as exc:
        raise Refused(f"Job #{job_id} was not cancelled: {exc}.") from exc
    if done is cancellation.Cancelled.NOW:
        return Done(f"Cancelled job #{job_id}.")
    grace = get_state().settings.cancel_grace_seconds
    return Done(
        f"Asked the worker running job #{job_id} to stop it: the handler is told now "
        f"and stopped hard {grace:g}s after its worker hears of it."
    )


@bp.get("/jobs/cancel")
@auth.requires(Role.OPERATOR)
def cancel_preview() -> Any:
    """What "Cancel all matching…" would do, before anything changes."""
    filters = JobFilters.from_args(request.args)
    with db.read() as conn:
        now = db.now(conn)
        impact = cancellation.preview_cancel(conn, filters, now=now)
    return render(
        "jobs/cancel_preview.html",
        impact=impact,
        filter_args=filters.to_args(),
        grace=get_state().settings.cancel_grace_seconds,
        reason_max=REASON_MAX_CHARS,
        next=safe_target(request.args.get("next"), ""),
        now=now,
    )


@bp.post("/jobs/cancel")
@auth.requires(Role.OPERATOR)
@action("jobdesk.jobs.index", refused="Nothing changed", catches=(ValidationError,))
def cancel_matching() -> Done:
    filters = JobFilters.from_args(request.form)
    low = parse_positive_int("low", request.form.get("low"))
    high = parse_positive_int("high", request.form.get("high"))
    if low is None or high is None or low > high:
        raise ValidationError(
            "range", "the confirmation is missing its id range; open the preview again"
        )
    with db.write() as conn:
        result = cancellation.bulk_cancel(
            conn,
            filters,
            id_range=(low, high),
            actor=auth.actor(),
            reason=request.form.get("reason"),
            now=db.now(conn),
        )
    parts = [f"Cancelled {plural(len(result.cancelled), 'job')}."]
    if result.stopping:
        parts.append(f"Asked the workers to stop {plural(len(result.stopping), 'running job')}.")
    if result.skipped:
        parts.append(f"{plural(result.skipped, 'job')} had finished meanwhile.")
    done = result.cancelled or result.stopping
    return Done(" ".join(parts), "success" if done else "info")


def _fix_form(
    job_id: int,
    *,
    text: str | None = None,
    errors: list[ValidationError] | None = None,
    reason: str = "",
    keep: bool = False,
    status: int = 200,
) -> Any:
    with db.read() as conn:
        found = job_detail(conn, job_id)
    job = found.job
    shown = mask_payload(job["payload"])
    if text is None:
        text = json.dumps(shown, indent=2, ensure_ascii=False)
    by_field: dict[str, list[str]] = {}
    for error in errors or []:
        by_field.setdefault(error.field, []).append(error.message)
    page = render_template(
        "dead/fix.html",
        job=job,
        detail=found,
        text=text,
        errors=by_field,
        reason=reason,
        keep_secrets=keep,
        has_masked=shown != job["payload"],
        reason_max=REASON_MAX_CHARS,
        next=safe_target(request.values.get("next"), _job_url(job_id)),
    )
    return page, status


@bp.get("/jobs/<jobdesk_id:job_id>/fix")
@auth.requires(Role.OPERATOR)
def fix_form(job_id: int) -> Any:
    return _fix_form(job_id)


@bp.post("/jobs/<jobdesk_id:job_id>/fix")
@auth.requires(Role.OPERATOR)
@action(_job_url, refused="Your edit was not saved", catches=())
def fix(job_id: int) -> Any:
    text = request.form.get("payload", "")
    reason = request.form.get("reason", "")
    keep_secrets = request.form.get("keep_secrets") == "yes"
    try:
        payload = parse_payload_text(text)
        with db.write() as conn:
            new_id = triage.fix_and_retry(
                conn,
                job_id,
                payload,
                actor=auth.actor(),
                reason=reason,
                now=db.now(conn),
                max_payload_bytes=_max_payload_bytes(),
                keep_secrets=keep_secrets,
            )
    except ConflictError as exc:
        raise Refused(
            f"Your edit was not saved: {exc}. The page shows the current state.",
            to=_job_url(job_id),
        ) from exc
    except PayloadErrors as exc:
        return _fix_form(
            job_id, text=text, errors=exc.errors, reason=reason, keep=keep_secrets, status=422
        )
    except ValidationError as exc:
        return _fix_form(
            job_id, text=text, errors=[exc], reason=reason, keep=keep_secrets, status=422
        )
    return Done(
        f"Fixed the payload and requeued job #{job_id} as new job #{new_id}.",
        href=_job_url(new_id),
        link=f"Open job #{new_id}",
        to=_job_url(job_id),
    )


def _max_payload_bytes() -> int:
    return get_state().settings.max_payload_bytes


@bp.post("/dead/bulk")
@auth.requires(Role.OPERATOR)
@action("jobdesk.dead.index", refused="Nothing changed", catches=(ValidationError,))
def bulk() -> Done:
    verb = request.form.get("action")
    if verb not in ("retry", "ignore"):
        raise ValidationError("action", "must be retry or ignore")
    selection = parse_bulk_selection(request.form, with_range=True)
    reason = request.form.get("reason")
    with db.write() as conn:
        now = db.now(conn)
        run = triage.bulk_retry if verb == "retry" else triage.bulk_ignore
        result = run(conn, selection, actor=auth.actor(), reason=reason, now=now)
    parts = [f"{'Requeued' if verb == 'retry' else 'Ignored'} {plural(result.done, 'job')}."]
    if result.already_resolved:
        parts.append(f"{plural(result.already_resolved, 'job')} had already been resolved.")
    if result.unknown_type:
        parts.append(f"{plural(result.unknown_type, 'job')} skipped: their type is unknown.")
    if verb != "retry" or result.audit_id is None:
        return Done(" ".join(parts), "success" if result.done else "info")
    # Finish the story: link to exactly the jobs this action made, with their progress
    # by status refreshing in the message until all are final.
    return Done(
        " ".join(parts),
        "success" if result.done else "info",
        href=url_for("jobdesk.jobs.index", from_audit=result.audit_id),
        link=f"Follow the {plural(result.done, 'new job')}",
        progress=url_for("jobdesk.jobs.progress", from_audit=result.audit_id),
    )
