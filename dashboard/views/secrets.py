"""An admin reveals one secret of a job (audited). The value comes back on a page of its
own, never cached and never in a flash message (those travel in the session cookie); a
refusal (no such secret, no key that opens it) flashes on the job's page like any
action's, and nothing is audited."""

from __future__ import annotations

from flask import Blueprint, Response, request, url_for

from jobdesk.dashboard import auth, db
from jobdesk.dashboard.actions import REFUSALS, action
from jobdesk.dashboard.htmx import render
from jobdesk.dashboard.state import get_state
from jobdesk.shared.operator.commands.secrets import reveal_secret
from jobdesk.shared.operator.models import Role
from jobdesk.shared.secrets.keys import KeysError, sealer_for

bp = Blueprint("secrets", __name__)


def _job_url(job_id: int, name: str) -> str:
    del name
    return url_for("jobdesk.jobs.detail", job_id=job_id)


@bp.post("/jobs/<jobdesk_id:job_id>/secrets/<name>/reveal")
@auth.requires(Role.ADMIN)
@action(_job_url, refused="Not revealed", catches=(*REFUSALS, KeysError))
def reveal(job_id: int, name: str) -> Response:
    sealer = sealer_for(get_state().settings.encryption_keys)
    with db.write() as conn:
        value = reveal_secret(
            conn,
            job_id,
            name,
            sealer=sealer,
            actor=auth.actor(),
            reason=request.form.get("reason"),
            now=db.now(conn),
        )
    body = render("jobs/secret.html", job_id=job_id, name=name, value=value)
    response = Response(body, mimetype="text/html")
    response.headers["Cache-Control"] = "no-store"
    return response
