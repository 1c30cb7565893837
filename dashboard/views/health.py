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
    """Ready when the database answers. Says nothing about the database to the caller
    (anyone may ask): the reason goes to the log. Only for a Host that cannot be a
    rebound DNS name (an IP literal, `localhost`, `JOBDESK_ALLOWED_HOSTS`)."""
    if not rebinding_safe(request.host, get_state().settings.allowed_hosts):
        return jsonify(status="refused", error="unknown host; see JOBDESK_ALLOWED_HOSTS"), 403
    try:
        with db.read() as conn:
            conn.execute(sa.select(1)).scalar_one()
    except sa.exc.SQLAlchemyError as exc:
        detail = str(getattr(exc, "orig", exc)).strip().splitlines()
        current_app.logger.warning(
            "readyz: database unavailable: %s",
            mask_text(detail[0] if detail else type(exc).__name__)[:300],
            extra={"action": "readyz_failed"},
        )
        return jsonify(status="unavailable"), 503
    return jsonify(status="ok")
