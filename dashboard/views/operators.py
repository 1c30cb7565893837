"""Operators (admin only): the dashboard accounts with role, state, creation and last
login; add an account, change its role, disable / enable it, reset its password.

Every change goes through `shared.operator.commands.accounts` (the functions `jobdesk users`
uses), so it is audited in its own transaction, and disable, enable and a password
reset end every session of the account. Two rules the CLI does not have: the last
enabled admin can be neither disabled nor demoted here (the dashboard would have nobody
left to manage it), and an admin cannot disable the account they are signed in with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import Blueprint, render_template, request, url_for

from jobdesk.dashboard import auth, db
from jobdesk.dashboard.actions import Done, action
from jobdesk.shared.core.errors import ConflictError, NotFoundError, ValidationError
from jobdesk.shared.core.models import NAME_LENGTH
from jobdesk.shared.operator.commands.accounts import (
    ROLES,
    UsernameTakenError,
    add_operator,
    check_role,
    check_username,
    list_operators,
    require_operator,
    set_disabled,
    set_password,
    set_role,
)
from jobdesk.shared.operator.models import Role
from jobdesk.shared.operator.passwords import PASSWORD_MAX_CHARS, PASSWORD_MIN_CHARS, check_password

bp = Blueprint("operators", __name__)

#: HTTP status of a form shown again with its problems next to the fields.
UNPROCESSABLE = 422

#: Problems by form, then by field: `{"add": {"password": "must be …"}}`,
#: `{"password:ana": {...}}` for one row's reset form.
FormErrors = dict[str, dict[str, str]]


def _page(errors: FormErrors | None = None, entered: Mapping[str, str] | None = None) -> str:
    with db.read() as conn:
        now = db.now(conn)
        accounts = list_operators(conn)
    return render_template(
        "operators/index.html",
        accounts=accounts,
        roles=ROLES,
        now=now,
        errors=errors or {},
        entered=entered or {},
        me=auth.actor(),
        password_min=PASSWORD_MIN_CHARS,
        password_max=PASSWORD_MAX_CHARS,
        username_max=NAME_LENGTH,
    )


def _fallback() -> str:
    return url_for("jobdesk.operators.index")


@bp.get("/operators")
@auth.requires(Role.ADMIN)
def index() -> Any:
    return _page()


@bp.post("/operators")
@auth.requires(Role.ADMIN)
@action("jobdesk.operators.index", refused="Account not added", catches=())
def add() -> Any:
    username = (request.form.get("username") or "").strip()
    role = request.form.get("role") or ""
    password = request.form.get("password") or ""
    problems: dict[str, str] = {}
    for field, check, value in (
        ("username", check_username, username),
        ("role", check_role, role),
        ("password", lambda value: check_password(value, username=username), password),
    ):
        try:
            check(value)
        except ValidationError as exc:
            problems[field] = exc.message
    if not problems:
        try:
            with db.write() as conn:
                account = add_operator(
                    conn, username, password, role, now=db.now(conn), actor=auth.actor()
                )
        except UsernameTakenError as exc:
            problems["username"] = (
                f"{username} already exists (a disabled account keeps its name)"
                if exc.existing == username
                else f"{exc.existing} already exists, and usernames are case-insensitive: "
                f"{username} would be the same name (a disabled account keeps its name)"
            )
    if problems:
        body = _page({"add": problems}, {"username": username, "role": role})
        return body, UNPROCESSABLE
    return Done(f"Added {account.username} as {account.role}; they can log in now.", to=_fallback())


@bp.post("/operators/<username>/role")
@auth.requires(Role.ADMIN)
@action("jobdesk.operators.index", refused=lambda username: f"Account {username} not changed")
def change_role(username: str) -> Done:
    role = request.form.get("role") or ""
    with db.write() as conn:
        before = require_operator(conn, username).role
        account = set_role(
            conn, username, role, now=db.now(conn), actor=auth.actor(), keep_an_admin=True
        )
    if before == account.role:
        return Done(f"{username} is already {account.role}; nothing changed.", "info")
    changed = f"{username} is now {account.role} (was {before}), from their next click."
    if account.username == auth.actor() and account.role != Role.ADMIN:
        # This page is for admins: the next one is the overview.
        return Done(changed, to=url_for("jobdesk.overview.index"))
    return Done(changed)


@bp.post("/operators/<username>/disable")
@auth.requires(Role.ADMIN)
@action("jobdesk.operators.index", refused=lambda username: f"Account {username} not disabled")
def disable(username: str) -> Done:
    if username.lower() == auth.actor().lower():
        raise ConflictError(
            "it is the account you are signed in with; another admin can disable it"
        )
    with db.write() as conn:
        set_disabled(conn, username, True, now=db.now(conn), actor=auth.actor(), keep_an_admin=True)
    return Done(f"Disabled {username}; every session of the account has ended.")


@bp.post("/operators/<username>/enable")
@auth.requires(Role.ADMIN)
@action("jobdesk.operators.index", refused=lambda username: f"Account {username} not enabled")
def enable(username: str) -> Done:
    with db.write() as conn:
        set_disabled(conn, username, False, now=db.now(conn), actor=auth.actor())
    return Done(f"Enabled {username}; they log in again with their password.")


@bp.post("/operators/<username>/password")
@auth.requires(Role.ADMIN)
@action(
    "jobdesk.operators.index",
    refused=lambda username: f"Account {username} not changed",
    catches=(NotFoundError,),
)
def reset_password(username: str) -> Any:
    password = request.form.get("password") or ""
    try:
        check_password(password, username=username)
        with db.write() as conn:
            account = set_password(conn, username, password, now=db.now(conn), actor=auth.actor())
    except ValidationError as exc:
        return _page({f"password:{username}": {exc.field: exc.message}}), UNPROCESSABLE
    identity = auth.current()
    if (
        identity is not None
        and identity.source == "password"
        and account.username == identity.username
    ):
        # The reset ended every session of the account, this one too: carry on in a new
        # one (the other devices stay signed out).
        auth.start_session(account)
        return Done("Your password is changed; your other sessions have ended.")
    return Done(f"Password of {username} reset; their open sessions have ended.")
