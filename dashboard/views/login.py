"""Logging in and out. Until an operator account exists the login page explains how
to create one (`jobdesk users add NAME --role admin`) and refuses every attempt."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, g, redirect, render_template, request, url_for

from jobdesk.dashboard import auth, db
from jobdesk.dashboard.navigation import safe_target
from jobdesk.shared.operator.commands.accounts import any_operator_exists
from jobdesk.shared.operator.login_throttle import attempt_login
from jobdesk.shared.operator.models import Role

bp = Blueprint("login", __name__)
MAX_FIELD_CHARS = 1024


def _page(status: int = 200, **context: Any) -> Any:
    with db.read() as conn:
        no_operator = not auth.proxy_configured() and not any_operator_exists(conn)
    context.setdefault("next", safe_target(request.values.get("next"), ""))
    return render_template("auth/login.html", no_operator=no_operator, **context), status


@bp.get("/login")
@auth.public
def login() -> Any:
    if g.get("identity") is not None:
        return redirect(safe_target(request.args.get("next"), url_for("jobdesk.overview.index")))
    return _page()


@bp.post("/login")
@auth.public
def login_submit() -> Any:
    username = (request.form.get("username") or "").strip()[:MAX_FIELD_CHARS]
    password = (request.form.get("password") or "")[:MAX_FIELD_CHARS]
    # The client address as resolved from the TCP peer and JOBDESK_TRUSTED_PROXIES; the
    # per-username bucket also holds when a client can change it (see login_throttle).
    address = request.remote_addr or "unknown"
    with db.write() as conn:
        attempt = attempt_login(conn, address, username, password, now=db.now(conn))
    if attempt.retry_after > 0:
        wait = attempt.retry_after
        response = _page(
            429,
            username=username,
            error=f"Too many failed attempts. Try again in {int(wait // 60) + 1} min.",
        )
        body, status = response
        return body, status, {"Retry-After": str(int(wait) + 1)}
    account = attempt.account
    if account is None:
        return _page(401, username=username, error="Wrong username or password.")
    auth.start_session(account)
    return redirect(
        safe_target(request.form.get("next"), url_for("jobdesk.overview.index")), code=303
    )


@bp.post("/logout")
@auth.requires(Role.VIEWER)
def logout() -> Any:
    with db.write() as conn:
        auth.end_session(conn)
    return redirect(url_for("jobdesk.login.login"), code=303)
