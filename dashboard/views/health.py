"""`/healthz` (the process answers) and `/readyz` (the database answers too)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from flask import Blueprint, current_app, jsonify, request

from jobdesk.dashboard import db
from jobdesk.dashboard.auth import public
from jobdesk.dashboard.security import rebinding_safe
from jobdesk.dashboard.state import get_state
from jobdesk.shared.core.masking import mask_text

bp = Blueprint("health", __name__)


@bp.get("/healthz")
@public
def healthz() -> Any:
    return jsonify(status="ok")


@bp.get("/readyz")
@public
def readyz() -> Any:
    """Ready when the database answers and holds Jobdesk's schema at this version's
    migrations. Says nothing about the database itself to the caller (anyone may ask):
    an unreachable database's reason goes to the log; a missing schema is named, since
    what fixes it (`jobdesk migrate`) reveals nothing. Only for a Host that cannot be a
    rebound DNS name (an IP literal, `localhost`, `JOBDESK_ALLOWED_HOSTS`)."""
    # Alembic, which knows the migrations, is loaded by the first probe, not at start-up.
    from jobdesk.shared.migrate import schema_problem

    if not rebinding_safe(request.host, get_state().settings.allowed_hosts):
        return jsonify(status="refused", error="unknown host; see JOBDESK_ALLOWED_HOSTS"), 403
    try:
        with db.read() as conn:
            conn.execute(sa.select(1)).scalar_one()
            problem = schema_problem(conn)
    except sa.exc.SQLAlchemyError as exc:
        detail = str(getattr(exc, "orig", exc)).strip().splitlines()
        current_app.logger.warning(
            "readyz: database unavailable: %s",
            mask_text(detail[0] if detail else type(exc).__name__)[:300],
            extra={"action": "readyz_failed"},
        )
        return jsonify(status="unavailable"), 503
    if problem is not None:
        current_app.logger.warning("readyz: %s", problem, extra={"action": "readyz_failed"})
        return jsonify(status="unavailable", error=problem), 503
    return jsonify(status="ok")
