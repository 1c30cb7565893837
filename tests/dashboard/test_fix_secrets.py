"""Fix & retry never moves a stored secret to a destination silently, never saves a
mask as data, and audits what really changed (issue 12 #13)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.operator.commands import triage
from jobdesk.shared.operator.queries.audit import entries_for_job
from tests.dashboard.conftest import Browser
from tests.factories import job_row, make_job

# Roles, headers, forms and rendering: the same on either database.
pytestmark = pytest.mark.one_database

NOW = datetime.now(UTC)
SECRET = "Bearer live-9f8e7d6c5b4a"
PAYLOAD = {
    "endpoint": "crm",
    "event": "user.created",
    "data": {"id": 1, "api_key": "k-1234567890", "header": f"Authorization: {SECRET}"},
}


def _dead(conn: sa.Connection, payload: dict[str, object] = PAYLOAD, **fields: object) -> int:
    values: dict[str, object] = {
        "job_type": "webhook.deliver",
        "status": "dead",
        "attempts": 5,
        "max_attempts": 5,
        "payload": payload,
    }
    values.update(fields)
    return make_job(conn, **values)


def _shown(payload: object) -> dict[str, object]:
    """What the fix form shows an operator."""
    from jobdesk.shared.core.masking import mask_payload

    result: dict[str, object] = mask_payload(payload)
    return result


def test_moving_the_job_to_another_endpoint_does_not_take_the_secrets_along(
    engine: sa.Engine,
) -> None:
    with engine.begin() as conn:
        old = _dead(conn)
    moved = {**_shown(PAYLOAD), "endpoint": "attacker-sink"}
    with engine.begin() as conn, pytest.raises(ValidationError) as caught:
        triage.fix_and_retry(conn, old, moved, actor="ana", now=NOW)
    assert "attacker-sink" in caught.value.message
    assert "data.api_key" in caught.value.message
    with engine.connect() as conn:
        assert job_row(conn, old).resolution is None
    # Re-entering the secret for the new destination is fine without confirming.
    retyped = {
        **moved,
        "data": {"id": 1, "api_key": "k-for-the-sink", "header": "Authorization: none"},
    }
    with engine.begin() as conn:
        new = triage.fix_and_retry(conn, old, retyped, actor="ana", now=NOW)
    with engine.connect() as conn:
        assert job_row(conn, new).payload["data"]["api_key"] == "k-for-the-sink"


def test_an_edit_that_keeps_the_destination_keeps_the_secrets(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        old = _dead(conn)
    edited = _shown(PAYLOAD)
    edited["event"] = "user.updated"
    with engine.begin() as conn:
        new = triage.fix_and_retry(conn, old, edited, actor="ana", now=NOW)
    with engine.connect() as conn:
        fixed = job_row(conn, new).payload
        entry = entries_for_job(conn, old)[0]
    assert fixed == {**PAYLOAD, "event": "user.updated"}
    assert entry.details is not None
    assert entry.details["diff"]["changed"] == {
        "event": {"before": "user.created", "after": "user.updated"}
    }
    assert sorted(entry.details["kept_secrets"]) == ["data.api_key", "data.header"]
    assert "kept_secrets_for_new_destination" not in entry.details
    assert "live-9f8e" not in str(entry.details)


def test_a_partly_masked_string_left_as_shown_keeps_the_stored_value(engine: sa.Engine) -> None:
    """The form shows `"Authorization: ***"`; left alone it used to be saved literally
    (a broken header) while the audit diff showed no change."""
    with engine.begin() as conn:
        old = _dead(conn)
    shown = _shown(PAYLOAD)
    assert shown["data"]["header"] == "Authorization: ***"  # type: ignore[index]
    with engine.begin() as conn:
        new = triage.fix_and_retry(conn, old, shown, actor="ana", now=NOW)
    with engine.connect() as conn:
        assert job_row(conn, new).payload["data"]["header"] == f"Authorization: {SECRET}"


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        ({"header": "X-Authorization: ***"}, "payload.data.header"),  # edited around it
        ({"copy": "***"}, "payload.data.copy"),  # a mask copied to a new field
        ({"api_key": "***", "header": "Authorization: *** "}, "payload.data.header"),
    ],
)
def test_a_mask_is_never_saved_as_data(engine: sa.Engine, edit: dict[str, str], field: str) -> None:
    with engine.begin() as conn:
        old = _dead(conn)
    edited = _shown(PAYLOAD)
    edited["data"] = {**edited["data"], **edit}  # type: ignore[dict-item]
    with engine.begin() as conn, pytest.raises(ValidationError) as caught:
        triage.fix_and_retry(conn, old, edited, actor="ana", now=NOW, keep_secrets=True)
    assert field in str(caught.value)
    assert "still contains ***" in str(caught.value)


def test_a_type_without_declared_destinations_needs_the_explicit_choice(
    engine: sa.Engine,
) -> None:
    from jobdesk.shared.core.worker_registry import register_worker

    payload = {"target": "https://a.example/", "password": "pw-123456"}
    with engine.begin() as conn:
        # A worker that runs the app's type (a retry of an unknown type is refused).
        register_worker(
            conn, worker_id="w1", host="h", pid=1, queues=["default"],
            job_types=["app.sync"], concurrency=1, version="t", now=NOW,
        )  # fmt: skip
        old = _dead(conn, payload, job_type="app.sync")
    edited = {"target": "https://b.example/", "password": "***"}
    with engine.begin() as conn, pytest.raises(ValidationError, match="declares no destination"):
        triage.fix_and_retry(conn, old, edited, actor="ana", now=NOW)
    with engine.begin() as conn:
        new = triage.fix_and_retry(conn, old, edited, actor="ana", now=NOW, keep_secrets=True)
    with engine.connect() as conn:
        assert job_row(conn, new).payload["password"] == "pw-123456"
        assert entries_for_job(conn, old)[0].details["kept_secrets_for_new_destination"]  # type: ignore[index]


def test_the_fix_form_asks_and_the_audit_page_says_what_was_kept(
    operator: Browser, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        old = _dead(conn)
    form = operator.get(f"/jobs/{old}/fix").get_data(as_text=True)
    assert 'name="keep_secrets"' in form
    moved = json.dumps({**_shown(PAYLOAD), "endpoint": "other"})
    refused = operator.post(f"/jobs/{old}/fix", {"payload": moved})
    assert refused.status_code == 422
    assert "the destination changed" in refused.get_data(as_text=True)
    done = operator.post(f"/jobs/{old}/fix", {"payload": moved, "keep_secrets": "yes"})
    assert done.status_code == 303
    audit = operator.get("/audit").get_data(as_text=True)
    assert "Kept stored secrets" in audit
    assert "for a new destination, as confirmed" in audit
    assert "live-9f8e" not in audit


def test_declared_destination_fields_let_other_edits_keep_secrets(engine: sa.Engine) -> None:
    from jobdesk.shared.core.worker_registry import register_worker

    triage.register_destination_fields("app.push", ("target",))
    payload = {"target": "https://a.example/", "password": "pw-123456", "n": 1}
    with engine.begin() as conn:
        register_worker(
            conn, worker_id="w2", host="h", pid=2, queues=["default"],
            job_types=["app.push"], concurrency=1, version="t", now=NOW,
        )  # fmt: skip
        old = _dead(conn, payload, job_type="app.push")
    with engine.begin() as conn:
        new = triage.fix_and_retry(
            conn, old, {**payload, "password": "***", "n": 2}, actor="ana", now=NOW
        )
    with engine.connect() as conn:
        assert job_row(conn, new).payload == {**payload, "n": 2}
