"""The dashboard blueprint: every page blueprint nested under one parent `bp`, plus the
guard that runs before each of them (CSRF, identity, role) and the security headers.

Mounting the parent blueprint is all a host app needs (`init_dashboard` does it); the
guard only ever applies to dashboard routes.
"""

from __future__ import annotations

import io
from typing import Any

import sqlalchemy as sa
from flask import Blueprint, Response, current_app, g, redirect, render_template, request, url_for
from werkzeug.exceptions import RequestEntityTooLarge

from jobdesk.dashboard import auth, csrf, db
from jobdesk.dashboard.htmx import is_htmx
from jobdesk.dashboard.navigation import here
from jobdesk.dashboard.security import apply_headers, host_allowed
from jobdesk.dashboard.state import get_state
from jobdesk.dashboard.views import (
    alerts,
    audit,
    batches,
    dead,
    endpoints,
    health,
    history,
    holds,
    jobs,
    login,
    operators,
    overview,
    queues,
    redrives,
    schedules,
    secrets,
    settings,
    triage_actions,
    workers,
)
from jobdesk.shared.assets import asset_path
from jobdesk.shared.core.errors import (
    NO_SCHEMA,
    ConflictError,
    NotFoundError,
    ValidationError,
    missing_schema,
)
from jobdesk.shared.operator.commands.accounts import any_operator_exists, role_at_least
from jobdesk.shared.operator.filters import check_id

bp = Blueprint(
    "jobdesk",
    __name__,
    template_folder=str(asset_path("templates")),
    static_folder=str(asset_path("static")),
    static_url_path="/static",
)
for child in (
    overview,
    jobs,
    batches,
    dead,
    triage_actions,
    redrives,
    secrets,
    history,
    audit,
    endpoints,
    queues,
    holds,
    schedules,
    alerts,
    workers,
    operators,
    settings,
    health,
    login,
):
    bp.register_blueprint(child.bp)


def _refuse(status: int, message: str, *, title: str | None = None) -> Any:
    if request.method == "GET" and not is_htmx():
        page = render_template("errors/error.html", status=status, message=message, title=title)
        return page, status
    return Response(message + "\n", status=status, mimetype="text/plain")


def _to_login() -> Any:
    target = url_for("jobdesk.login.login", next=here())
    if is_htmx():
        response = Response("login required\n", status=401, mimetype="text/plain")
        response.headers["HX-Redirect"] = target
        return response
    if request.method != "GET":
        return Response("login required\n", status=401, mimetype="text/plain")
    return redirect(target, code=303)


def _limit_body() -> Any:
    """Refuse an oversized body before anything parses it (413), and multipart (415).

    Per request, not through the app's MAX_CONTENT_LENGTH, so a host app keeps its own
    limits for its own routes. A declared Content-Length over the limit is refused
    without reading a byte. A body without one (chunked) is read here up to one byte
    past the limit: over it is a 413 — Werkzeug alone would cut such a body off at the
    limit and parse the truncated form — within it, it is handed on with its length.
    The form-field limit follows too, so Flask's 500 kB default never refuses a fix form
    the dashboard accepts.
    """
    limit = get_state().request_body_limit
    request.max_content_length = limit
    request.max_form_memory_size = limit
    length = request.content_length
    if length is not None and length > limit:
        return _refuse(
            413, f"Refused: the request body is {length:,} bytes; the limit is {limit:,} bytes."
        )
    if request.mimetype == "multipart/form-data":
        # No dashboard form uploads files; a multipart body's file parts would be
        # spooled to disk before any check ran.
        return _refuse(
            415, "Refused: the dashboard accepts form posts (application/x-www-form-urlencoded)."
        )
    environ = request.environ
    if length is None and environ.get("wsgi.input_terminated"):
        body = _read_at_most(environ["wsgi.input"], limit + 1)
        if len(body) > limit:
            return _refuse(413, f"Refused: the request body is over the limit of {limit:,} bytes.")
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        environ.pop("HTTP_TRANSFER_ENCODING", None)
        del environ["wsgi.input_terminated"]
    return None


def _read_at_most(stream: Any, size: int) -> bytes:
    chunks, left = [], size
    while left > 0:
        chunk = stream.read(min(left, 64 * 1024))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def check_path_ids() -> None:
    """Every integer in the path (`<jobdesk_id:job_id>`) is an id that can exist, and no
    text in it carries control characters (PostgreSQL refuses NUL outright); else 400
    naming it. (The converter turned any id out of range into `OUT_OF_RANGE`.)"""
    for name, value in (request.view_args or {}).items():
        if isinstance(value, int):
            check_id(name, value)
        elif isinstance(value, str) and any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise ValidationError(name, "must not contain control characters")


def check_query_text() -> None:
    """The query string is UTF-8 text the databases can take, else a 400 naming the
    parameter — not a 500 from deep inside Werkzeug or a query: raw bytes that are not
    UTF-8 (Werkzeug decodes the query string strictly and raises), and lone surrogates
    (which a request class decoding with `surrogateescape` makes of such bytes). A form
    body that is not UTF-8 parses as empty (Werkzeug's parser is silent), so the CSRF
    check refuses it."""
    try:
        items = list(request.args.items(multi=True))
    except UnicodeDecodeError:
        raise ValidationError(
            "query", "is not valid UTF-8 (percent-encode anything else)"
        ) from None
    for name, value in items:
        for text, field in ((name, "query"), (value, name)):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise ValidationError(
                    field[:40], "is not valid UTF-8 text (it holds a lone surrogate)"
                ) from None


@bp.before_request
def guard() -> Any:
    """Fail closed: host and body size first, CSRF, then identity, then the view's
    declared role."""
    allowed = get_state().settings.allowed_hosts
    if not host_allowed(request.host, allowed):
        return _refuse(400, "Refused: this dashboard does not answer to that host name.")
    too_large = _limit_body()
    if too_large is not None:
        return too_large
    if request.endpoint == "jobdesk.static":
        return None
    check_query_text()
    check_path_ids()
    problem = csrf.problem()
    if problem is not None:
        return _refuse(403, f"Refused: {problem}.")
    view = current_app.view_functions.get(request.endpoint or "")
    role = auth.required_role(view)
    if role is None:
        return _refuse(403, "Refused: this route declares no access rule.")
    if role == auth.PUBLIC and request.endpoint in (
        "jobdesk.health.healthz",
        "jobdesk.health.readyz",
    ):
        return None
    with db.read() as conn:
        g.identity = auth.load_identity(conn)
        if g.identity is None and role != auth.PUBLIC:
            g.no_operator_yet = not auth.proxy_configured() and not any_operator_exists(conn)
    if role == auth.PUBLIC:
        return None
    if g.identity is None:
        return _to_login()
    if not role_at_least(g.identity.role, role):
        return _refuse(
            403, f"Your role ({g.identity.role}) cannot do this; it needs the {role} role."
        )
    return None


@bp.after_request
def headers(response: Response) -> Response:
    return apply_headers(response)


@bp.errorhandler(ValidationError)
def bad_input(exc: ValidationError) -> Any:
    return _refuse(400, f"Bad input: {exc.field} {exc.message}.")


@bp.errorhandler(RequestEntityTooLarge)
def too_large(_exc: RequestEntityTooLarge) -> Any:
    limit = get_state().request_body_limit
    return _refuse(413, f"Refused: the request body is larger than {limit:,} bytes.")


@bp.errorhandler(NotFoundError)
def not_found(exc: NotFoundError) -> Any:
    return _refuse(404, f"Not found: {exc}.")


@bp.errorhandler(ConflictError)
def conflict(exc: ConflictError) -> Any:
    return _refuse(409, f"Conflict: {exc}.")


@bp.errorhandler(sa.exc.OperationalError)
def database_unavailable(exc: sa.exc.OperationalError) -> Any:
    if missing_schema(exc) is not None:  # SQLite: "no such table: jobdesk_…"
        return _no_schema()
    # Includes the dashboard's statement deadline firing (PostgreSQL statement_timeout,
    # SQLite interrupt): say so instead of a stack trace.
    return _refuse(
        503,
        "The database did not answer in time (or is unreachable). Narrow the filters and "
        "try again; if it persists, check the database.",
    )


@bp.errorhandler(sa.exc.ProgrammingError)
def database_refused(exc: sa.exc.ProgrammingError) -> Any:
    if missing_schema(exc) is not None:  # PostgreSQL: relation "jobdesk_…" does not exist
        return _no_schema()
    raise exc  # a bug, not the operator's to fix: the usual 500


def _no_schema() -> Any:
    """Every page, /login included, until `jobdesk migrate` has run (no restart needed:
    the next request after it works)."""
    return _refuse(503, f"{NO_SCHEMA}.", title="No Jobdesk schema")
