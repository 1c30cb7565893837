"""The audit log: every operator action, filterable by actor, action, job and time;
read-only (nothing in the dashboard can change or delete an entry)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, request

from jobdesk.dashboard import auth, db
from jobdesk.dashboard.htmx import render
from jobdesk.shared.operator.filters import PAGE_SIZES, AuditFilters
from jobdesk.shared.operator.models import Role
from jobdesk.shared.operator.queries.audit import ACTIONS, list_audit

bp = Blueprint("audit", __name__)


@bp.get("/audit")
@auth.requires(Role.VIEWER)
def index() -> Any:
    filters = AuditFilters.from_args(request.args, ACTIONS, mask_emails=auth.is_viewer_only())
    after = request.args.get("after") or None
    with db.read() as conn:
        now = db.now(conn)
        page = list_audit(conn, filters, after)
    return render(
        "audit/index.html",
        "audit/_results.html",
        "audit-results",
        filters=filters,
        args=filters.to_args(),
        page=page,
        after=after,
        actions=ACTIONS,
        page_sizes=PAGE_SIZES,
        now=now,
    )
