"""`/healthz` (the process answers) and `/readyz` (the database answers too)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from flask import Blueprint, jsonify

from jobdesk.dashboard import db
from jobdesk.dashboard.auth import public

bp = Blueprint("health", __name__)


@bp.get("/healthz")
@public
def healthz() -> Any:
    return jsonify(status="ok")


@bp.get("/readyz")
@public
def readyz() -> Any:
    try:
        with db.read() as conn:
            conn.execute(sa.select(1)).scalar_one()
    except sa.exc.SQLAlchemyError as exc:
        detail = str(getattr(exc, "orig", exc)).strip().splitlines()
        return jsonify(status="unavailable", error=(detail[0] if detail else "error")[:200]), 503
    return jsonify(status="ok")
