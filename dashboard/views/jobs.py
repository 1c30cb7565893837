"""The jobs list (filters, error search, keyset pages, bookmarkable URLs) and one job's
page (masked payload, attempts, deliveries, report progress, lineage, its batch and
dependencies, group lane, audit), plus a small status badge that polls only while the
job is still active.

The list is live without moving rows: it polls `news` ("3 new since you loaded —
show", and the shown rows' status swapped in place), and a list of the jobs one action
made (`from_audit`) shows their progress by status (`progress`) until all are final."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from flask import Blueprint, Response, redirect, request, url_for

from jobdesk.dashboard import auth, db
from jobdesk.dashboard.forms import request_filters
from jobdesk.dashboard.htmx import is_htmx, render
from jobdesk.dashboard.refresh import chosen_refresh
from jobdesk.dashboard.state import get_state
from jobdesk.dashboard.statuses import SHOWN_STATUSES
from jobdesk.dashboard.workflow import waiting_line
from jobdesk.shared.core.document_masking import mask_document_text
from jobdesk.shared.core.errors import NotFoundError, ValidationError
from jobdesk.shared.core.states import CLAIMABLE, FINAL, JobStatus, Resolution
from jobdesk.shared.flow.concurrency import key_slots
from jobdesk.shared.operator.filters import (
    DEFAULT_PAGE_SIZE,
    DEFAULT_SORT,
    HOLD_FILTERS,
    MAX_PAGE_SIZE,
    PAGE_SIZES,
    RANGES,
    SORTS,
    TIME_FIELDS,
    UNRESOLVED,
    JobFilters,
    parse_positive_int,
)
from jobdesk.shared.operator.models import Role
from jobdesk.shared.operator.queries.audit import entries_for_job
from jobdesk.shared.operator.queries.holds import (
    holds_for_job,
    holds_for_jobs,
    quarantines_for_jobs,
)
from jobdesk.shared.operator.queries.jobs import (
    Page,
    filter_conditions,
    job_detail,
    job_status,
    list_jobs,
    retries_of,
    stored_document,
)
from jobdesk.shared.operator.queries.live import (
    action_progress,
    new_jobs,
    newest_job_id,
    row_states,
)
from jobdesk.shared.operator.queries.totals import (
    FilterChoices,
    Total,
    filter_choices,
    matching_total,
)
from jobdesk.shared.retention.pruning import tombstone
from jobdesk.shared.secrets.store import secret_names
from jobdesk.shared.tracing.store import trace_of
from jobdesk.shared.workflows.queries import job_workflow

bp = Blueprint("jobs", __name__)

#: The statuses whose jobs can be held (the list asks why only for these).
WAITING = frozenset(str(status) for status in CLAIMABLE)
#: htmx stops polling an element when the response status is 286.
HTMX_STOP_POLLING = 286


def list_context(
    filters: JobFilters, after: str | None, before: str | None = None, *, load: bool = True
) -> dict[str, Any]:
    refresh = chosen_refresh()
    total: Total | None = None
    with db.read() as conn:
        now = db.now(conn)
        # The mark first: a job committed while the page is read is then announced as
        # new (even if it is also shown), never silently missed.
        newest_id = newest_job_id(conn) if load and refresh != "off" else 0
        page = Page([], None)
        if load:
            page = list_jobs(conn, filters, after, before=before, now=now)
            if before and not page.items:
                # Everything before the cursor is gone (pruned): start from the top.
                before = None
                page = list_jobs(conn, filters, now=now)
            total = matching_total(conn, filter_conditions(conn, filters, now), filters)
        choices = filter_choices(conn, filters) if load else FilterChoices([], [])
        holds = holds_for_jobs(
            conn, [job.id for job in page.items if job.status in WAITING], now=now
        )
        held = [job.id for job in page.items if job.status == JobStatus.WAITING.value]
        for job_id, quarantine in quarantines_for_jobs(conn, held).items():
            holds[job_id] = [quarantine]
    news_args: dict[str, Any] = filters.to_args()
    if newest_id:
        news_args["newer_than"] = str(newest_id)
    if page.items:
        news_args["shown"] = ",".join(str(job.id) for job in page.items)
    return {
        "refresh": refresh,
        "news_url": url_for("jobdesk.jobs.news", **news_args),
        "now": now,
        "filters": filters,
        "args": filters.to_args(),
        "page": page,
        "holds": holds,
        "after": after,
        "before": before,
        "total": total,
        "choices": choices,
        "statuses": SHOWN_STATUSES,
        "resolutions": [UNRESOLVED, *(str(r) for r in Resolution)],
        "sorts": SORTS,
        "page_sizes": PAGE_SIZES,
        "ranges": tuple(RANGES),
        "time_fields": TIME_FIELDS,
        "hold_filters": HOLD_FILTERS,
        "triage": filters.status == JobStatus.DEAD.value,
    }


#: What the filter form sends for fields left as they are: no filter at all.
_FORM_DEFAULTS = frozenset(
    {("time", "created"), ("sort", DEFAULT_SORT), ("page_size", str(DEFAULT_PAGE_SIZE))}
)


def clean_url() -> str | None:
    """This URL without its blank parameters and the form's defaults (a GET form sends
    every field), or None when it has none of them."""
    given = list(request.args.items(multi=True))
    kept = [
        (name, value)
        for name, value in given
        if value.strip() and (name, value) not in _FORM_DEFAULTS
    ]
    if len(kept) == len(given):
        return None
    return request.path + (f"?{urlencode(kept)}" if kept else "")


@bp.get("/jobs")
@auth.requires(Role.VIEWER)
def index() -> Any:
    clean = clean_url()
    if clean is not None and not is_htmx():
        return redirect(clean, code=302)
    try:
        filters = request_filters(request.args)
        after = request.args.get("after") or None
        before = request.args.get("before") or None
        context = list_context(filters, after, before)
    except ValidationError as exc:
        # Show the form again with the problem instead of an error page.
        context = list_context(JobFilters(), None, load=False)
        context["error"] = exc
        body = render("jobs/list.html", "jobs/_results.html", "job-results", **context)
        return body, 400
    response = Response(render("jobs/list.html", "jobs/_results.html", "job-results", **context))
    if clean is not None:
        # htmx submitted the form: the address bar gets the clean URL, not the blanks.
        response.headers["HX-Push-Url"] = clean
    return response


def _shown_ids(raw: str | None) -> list[int]:
    """`shown=1,2,3`: the ids of the rows on the page, at most one page."""
    if not raw:
        return []
    parts = raw.split(",")
    if len(parts) > MAX_PAGE_SIZE:
        raise ValidationError(
            "shown", f"lists {len(parts)} jobs; a page has at most {MAX_PAGE_SIZE}"
        )
    return [value for part in parts if (value := parse_positive_int("shown", part.strip()))]


@bp.get("/jobs/news")
@auth.requires(Role.VIEWER)
def news() -> Any:
    """How many jobs matching the list's filters arrived after the page was rendered,
    plus the current status of the rows it shows (swapped in place, out of band)."""
    filters = request_filters(request.args)
    newer_than = parse_positive_int("newer_than", request.args.get("newer_than")) or 0
    shown = _shown_ids(request.args.get("shown"))
    with db.read() as conn:
        now = db.now(conn)
        found = new_jobs(conn, filters, newer_than, now=now)
        states = row_states(conn, shown)
    args: dict[str, Any] = filters.to_args()
    return render(
        "jobs/_news.html",
        found=found,
        states=states,
        show_url=url_for("jobdesk.jobs.index", **args),
    )


@bp.get("/jobs/progress")
@auth.requires(Role.VIEWER)
def progress() -> Any:
    """Counts by status of the jobs one action made; polling stops once all are final."""
    audit_id = parse_positive_int("from_audit", request.args.get("from_audit"))
    if audit_id is None:
        raise ValidationError("from_audit", "is required: the audit entry of the action")
    with db.read() as conn:
        found = action_progress(conn, audit_id, now=db.now(conn))
    body = render("jobs/_progress.html", progress=found)
    code = HTMX_STOP_POLLING if found.active == 0 else 200
    return Response(body, status=code, mimetype="text/html")


@bp.get("/jobs/<jobdesk_id:job_id>")
@auth.requires(Role.VIEWER)
def detail(job_id: int) -> Any:
    with db.read() as conn:
        now = db.now(conn)
        try:
            found = job_detail(conn, job_id)
        except NotFoundError:
            kept = tombstone(conn, job_id)
            if kept is None:
                raise
            # Pruned by retention: what was kept of it, and what the audit trail says.
            return render(
                "jobs/pruned.html",
                job=kept,
                audit=entries_for_job(conn, job_id),
                retried_as=retries_of(conn, job_id),
                now=now,
            )
        holds = holds_for_job(conn, job_id, now=now)
        workflow = job_workflow(conn, job_id, found.job["status"])
        key = found.job["concurrency_key"]
        slots = workflow.slots  # read already when the job waits for one of them
        if slots is None and key is not None:
            slots = key_slots(conn, key)
        secrets = secret_names(conn, job_id)
        trace = trace_of(conn, job_id)
    return render(
        "jobs/detail.html",
        detail=found,
        job=found.job,
        now=now,
        final=found.job["status"] in FINAL,
        holds=holds,
        workflow=workflow,
        waiting=waiting_line(workflow),
        slots=slots,
        secrets=secrets,
        trace_id=trace.trace_id if trace else None,
        trace_url=_trace_url(trace.trace_id if trace else None),
    )


def _trace_url(trace_id: str | None) -> str | None:
    """`JOBDESK_TRACE_URL_TEMPLATE` with the job's trace id, when both exist."""
    template = get_state().settings.trace_url_template
    if trace_id is None or template is None:
        return None
    return template.replace("{trace_id}", trace_id)


@bp.get("/jobs/<jobdesk_id:job_id>/<any(payload, result):name>.json")
@auth.requires(Role.OPERATOR)
def raw_document(job_id: int, name: str) -> Any:
    """The stored document as it is in the database, for documents too large, too deep
    or too broken to show on the page — masked as the page masks (key-aware: values
    under secret keys too, not only what looks like a secret; emails for viewers)."""
    with db.read() as conn:
        text = stored_document(conn, job_id, name)
    masked = mask_document_text(text or "null", mask_emails=auth.is_viewer_only())
    response = Response(masked, mimetype="application/json")
    response.headers["Content-Disposition"] = f'attachment; filename="job-{job_id}-{name}.json"'
    response.headers["Cache-Control"] = "no-store"
    return response


@bp.get("/jobs/<jobdesk_id:job_id>/status")
@auth.requires(Role.VIEWER)
def status(job_id: int) -> Any:
    with db.read() as conn:
        now = db.now(conn)
        current = job_status(conn, job_id)
    body = render("jobs/_status.html", job=current, now=now)
    code = HTMX_STOP_POLLING if current["status"] in FINAL else 200
    return Response(body, status=code, mimetype="text/html")
