"""Your settings (every signed-in role, about their own account only): the time zone
the dashboard shows times in. Empty means "my browser's zone" (else UTC).

The choice is stored on the operators row (`accounts.set_timezone`), so it follows the
account to every browser; a name the time zone database does not know is shown back
with the problem next to the field. An identity without an account row (a host app's,
or a trusted proxy's default role) has nothing to store it on: the page says so and
the browser's zone applies.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, render_template, request, url_for

from jobdesk.dashboard import auth, db
from jobdesk.dashboard.actions import Done, Refused, action
from jobdesk.dashboard.state import get_state
from jobdesk.dashboard.viewer_zone import browser_zone, viewer_zone
from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.operator.commands.accounts import OperatorAccount, get_operator, set_timezone
from jobdesk.shared.operator.models import Role
from jobdesk.shared.operator.zones import ZONE_MAX_CHARS, check_timezone, zone_names

bp = Blueprint("settings", __name__)

#: HTTP status of the form shown again with its problem next to the field.
UNPROCESSABLE = 422


def _own_account(conn: Any) -> OperatorAccount | None:
    """The signed-in account's row; None for a host app's identity (its loader, not the
    table, says who is asking, so a stored setting would never be read)."""
    if get_state().identity_loader is not None:
        return None
    return get_operator(conn, auth.actor())


def _page(error: str | None = None, entered: str | None = None) -> str:
    with db.read() as conn:
        now = db.now(conn)
        account = _own_account(conn)
    return render_template(
        "settings/index.html",
        now=now,
        stored=account is not None,
        saved=account.timezone if account is not None else None,
        entered=entered,
        error=error,
        browser=browser_zone(),
        showing=viewer_zone(),
        zones=sorted(zone_names()),
        zone_max=ZONE_MAX_CHARS,
    )


@bp.get("/settings")
@auth.requires(Role.VIEWER)
def index() -> Any:
    return _page()


@bp.post("/settings")
@auth.requires(Role.VIEWER)
@action("jobdesk.settings.index", refused="Not saved")
def save() -> Any:
    raw = (request.form.get("timezone") or "").strip()
    try:
        zone = check_timezone(raw) if raw else None
    except ValidationError as exc:
        return _page(exc.message, raw), UNPROCESSABLE
    here = url_for("jobdesk.settings.index")
    with db.write() as conn:
        if _own_account(conn) is None:
            raise Refused("Your sign-in has no dashboard account to keep a setting on.", to=here)
        set_timezone(conn, auth.actor(), zone)
    if zone is None:
        return Done("Times now follow your browser's time zone.", to=here)
    return Done(f"Times are now shown in {zone}.", to=here)
