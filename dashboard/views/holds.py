"""Quarantine holds: on-call holds back every job of one tenant — by concurrency key,
group key or payload term — without pausing its queue (`shared.flow.holds`).

The page lists the active holds (what, why, who, since, until, how many jobs each holds
now, linked to exactly those jobs), then the released ones. Viewers read it; operators
place a hold — the form's first submit is a preview of what it takes (a GET: nothing
changes until the confirmation's POST) — and release one with an optional reason. Both
are audited (`hold.add`, `hold.release`) by the command itself.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from flask import Blueprint, render_template, request, url_for

from jobdesk.dashboard import auth, db
from jobdesk.dashboard.actions import Done, action
from jobdesk.dashboard.hold_form import (
    MATCH_LABELS,
    MAX_HOURS,
    HoldForm,
    HoldFormError,
    HoldRequest,
    read_hold,
)
from jobdesk.dashboard.templating import plural
from jobdesk.dashboard.viewer_zone import viewer_zone
from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.core.validation import REASON_MAX_CHARS, check_reason
from jobdesk.shared.flow.holds import REASON_LENGTH, place_hold, preview_hold, release_hold
from jobdesk.shared.operator.models import Role
from jobdesk.shared.operator.queries.holds import quarantines

bp = Blueprint("holds", __name__)

#: HTTP status of the form shown again with its problems next to the fields.
UNPROCESSABLE = 422
#: How many released holds the page shows (the audit log keeps every one).
RELEASED_SHOWN = 50
#: How many of the jobs a hold would take the preview links to.
SAMPLE_SHOWN = 10


def _page(form: HoldForm, problems: dict[str, str] | None = None) -> str:
    with db.read() as conn:
        now = db.now(conn)
        active = quarantines(conn, active=True)
        released = quarantines(conn, active=False, limit=RELEASED_SHOWN)
    return render_template(
        "holds/index.html",
        active=active,
        released=released,
        form=form,
        problems=problems or {},
        now=now,
        **_form_context(),
    )


def _form_context() -> dict[str, Any]:
    return {
        "matches": MATCH_LABELS,
        "max_hours": MAX_HOURS,
        "hold_reason_max": REASON_LENGTH,
        "reason_max": REASON_MAX_CHARS,
    }


def _read(form: HoldForm, conn: sa.Connection) -> tuple[HoldRequest, datetime]:
    """The form checked against the database's clock, on the viewer's wall clock."""
    zone = viewer_zone()
    now = db.now(conn)
    return read_hold(form, now=now, zone=zone.zone, zone_name=zone.name), now


@bp.get("/holds")
@auth.requires(Role.VIEWER)
def index() -> Any:
    # A link may prefill the form ("Quarantine tenant:42…" on a job's page).
    return _page(HoldForm.from_values(request.args))


@bp.get("/holds/preview")
@auth.requires(Role.OPERATOR)
def preview() -> Any:
    """What the hold would take now, before anything changes."""
    form = HoldForm.from_values(request.args)
    try:
        with db.read() as conn:
            wanted, now = _read(form, conn)
            found = preview_hold(conn, wanted.target, sample=SAMPLE_SHOWN)
    except HoldFormError as exc:
        return _page(form, exc.problems), UNPROCESSABLE
    return render_template(
        "holds/preview.html",
        form=form,
        wanted=wanted,
        preview=found,
        now=now,
        **_form_context(),
    )


@bp.post("/holds")
@auth.requires(Role.OPERATOR)
@action("jobdesk.holds.index", refused="Hold not placed", catches=())
def place() -> Any:
    form = HoldForm.from_values(request.form)
    try:
        with db.write() as conn:
            wanted, now = _read(form, conn)
            placed = place_hold(
                conn,
                wanted.target,
                reason=wanted.reason,
                actor=auth.actor(),
                now=now,
                until=wanted.until,
            )
    except HoldFormError as exc:
        return _page(form, exc.problems), UNPROCESSABLE
    except ValidationError as exc:  # the end passed between the preview and the confirmation
        return _page(form, {exc.field: exc.message}), UNPROCESSABLE
    return Done(
        f"Placed hold #{placed.id} on {placed.target.describe()}: "
        f"{plural(placed.held, 'job')} held now, and every new matching job until it is "
        "released.",
        href=url_for("jobdesk.jobs.index", held_by=placed.id),
        link="Show the held jobs",
        to=url_for("jobdesk.holds.index", _anchor=f"hold-{placed.id}"),
    )


@bp.post("/holds/<jobdesk_id:hold_id>/release")
@auth.requires(Role.OPERATOR)
@action("jobdesk.holds.index", refused=lambda hold_id: f"Hold #{hold_id} not released")
def release(hold_id: int) -> Done:
    reason = check_reason(request.form.get("reason"), required=False)
    with db.write() as conn:
        released = release_hold(conn, hold_id, actor=auth.actor(), now=db.now(conn), reason=reason)
    return Done(f"Released hold #{hold_id}: {plural(released, 'job')} back in line.")
