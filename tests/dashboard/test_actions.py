"""Actions through HTTP: POST → 303 back to the page with filters kept and a counted
flash; conflicts reload; bad input is refused by field; bulk previews then confirms."""

from __future__ import annotations

import re

import sqlalchemy as sa

from jobdesk.shared.alerts.models import alerts
from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.core.models import jobs
from jobdesk.shared.limits.models import circuit_breakers
from jobdesk.shared.webhooks.models import webhook_endpoints
from tests.dashboard.conftest import Browser, dead_job
from tests.factories import job_row, make_job

NOT_USERS = ~audit_log.c.action.like("operator.%")


def count(engine: sa.Engine, *where: sa.ColumnElement[bool]) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(sa.select(sa.func.count()).select_from(jobs).where(*where)).scalar_one()
        )


def test_retry_redirects_back_with_filters_and_a_flash(
    operator: Browser, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        job_id = dead_job(conn)
    back_to = "/jobs?status=dead&type=webhook.deliver&error=timed+out"
    response = operator.post(f"/jobs/{job_id}/retry", {"reason": "CRM is back", "next": back_to})
    assert response.status_code == 303
    assert response.headers["Location"] == back_to
    page = operator.get(back_to).get_data(as_text=True)
    assert f"Requeued job #{job_id} as new job #" in page
    with engine.connect() as conn:
        old = job_row(conn, job_id)
        new = conn.execute(sa.select(jobs).where(jobs.c.retried_from_id == job_id)).one()
        entry = conn.execute(sa.select(audit_log).where(audit_log.c.job_id.is_not(None))).one()
    assert (old.resolution, old.resolved_by, old.resolution_reason) == (
        "requeued",
        "otto",
        "CRM is back",
    )
    assert new.status == "queued"
    assert (entry.action, entry.actor, entry.job_id, entry.new_job_id) == (
        "retry",
        "otto",
        job_id,
        new.id,
    )
    again = operator.post(f"/jobs/{job_id}/retry", {"next": back_to})
    assert again.status_code == 303
    assert "already requeued by otto" in operator.get(back_to).get_data(as_text=True)
    assert count(engine) == 2


def test_fix_form_validates_per_field_and_keeps_the_text(
    operator: Browser, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        job_id = dead_job(
            conn,
            payload={
                "endpoint": "crm",
                "event": "user.created",
                "data": {"id": 1},
                "token": "tok_secret_value",
            },
        )
    form = operator.get(f"/jobs/{job_id}/fix").get_data(as_text=True)
    assert "tok_secret_value" not in form
    assert "***" in form
    broken = operator.post(f"/jobs/{job_id}/fix", {"payload": '{"endpoint": "crm",'})
    assert broken.status_code == 422
    assert "is not valid JSON" in broken.get_data(as_text=True)
    assert "{&#34;endpoint&#34;: &#34;crm&#34;," in broken.get_data(as_text=True)
    invalid = operator.post(f"/jobs/{job_id}/fix", {"payload": '{"endpoint": "C R M"}'})
    text = invalid.get_data(as_text=True)
    assert invalid.status_code == 422
    assert "<code>payload.endpoint</code>" in text
    assert "<code>payload.event</code> is required" in text
    nan = operator.post(f"/jobs/{job_id}/fix", {"payload": '{"n": NaN}'})
    assert nan.status_code == 422
    good = '{"endpoint": "crm-eu", "event": "user.created", "data": {"id": 1}, "token": "***"}'
    # Moving the job keeps the stored token only when the operator confirms it (issue 12
    # #13: it used to follow the job to the new endpoint silently).
    silent = operator.post(f"/jobs/{job_id}/fix", {"payload": good, "reason": "moved to EU"})
    assert silent.status_code == 422
    assert "the destination changed" in silent.get_data(as_text=True)
    done = operator.post(
        f"/jobs/{job_id}/fix", {"payload": good, "reason": "moved to EU", "keep_secrets": "yes"}
    )
    assert done.status_code == 303
    with engine.connect() as conn:
        new = conn.execute(sa.select(jobs).where(jobs.c.retried_from_id == job_id)).one()
        entry = conn.execute(sa.select(audit_log).where(audit_log.c.job_id.is_not(None))).one()
    assert new.payload["endpoint"] == "crm-eu"
    assert new.payload["token"] == "tok_secret_value"
    assert entry.action == "fix_retry"
    assert "tok_secret_value" not in str(entry.details)
    page = operator.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "crm-eu" in page
    assert "Fixed</strong> by otto" in page


def test_fix_after_someone_else_retried_is_a_conflict(
    app: object, engine: sa.Engine, operator: Browser, admin: Browser
) -> None:
    with engine.begin() as conn:
        job_id = dead_job(conn)
    operator.get(f"/jobs/{job_id}/fix")
    assert admin.post(f"/jobs/{job_id}/retry", {}).status_code == 303
    payload = '{"endpoint": "crm", "event": "e", "data": {}}'
    response = operator.post(f"/jobs/{job_id}/fix", {"payload": payload})
    assert response.status_code == 303
    assert response.headers["Location"] == f"/jobs/{job_id}"
    page = operator.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "Your edit was not saved" in page
    assert "already requeued by ada" in page
    assert count(engine) == 2


def test_ignore_needs_a_bounded_reason(operator: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        job_id = dead_job(conn)
    operator.post(f"/jobs/{job_id}/ignore", {"reason": "   "})
    assert "reason is required" in operator.get(f"/jobs/{job_id}").get_data(as_text=True)
    operator.post(f"/jobs/{job_id}/ignore", {"reason": "x" * 100_000})
    assert "the limit is 1,000" in operator.get(f"/jobs/{job_id}").get_data(as_text=True)
    with engine.connect() as conn:
        assert job_row(conn, job_id).resolution is None
    operator.post(f"/jobs/{job_id}/ignore", {"reason": "customer deleted"})
    with engine.connect() as conn:
        assert job_row(conn, job_id).resolution == "ignored"
    found = operator.get("/jobs?status=dead&resolution=ignored").get_data(as_text=True)
    assert f'href="/jobs/{job_id}"' in found


def test_unknown_type_retry_is_refused_clearly(operator: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        job_id = dead_job(conn, job_type="legacy.crm_sync")
    operator.post(f"/jobs/{job_id}/retry", {})
    page = operator.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "&#39;legacy.crm_sync&#39; is not known here" in page


def test_cancel_a_queued_job(operator: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        job_id = make_job(conn, job_type="email.send")
    operator.post(f"/jobs/{job_id}/cancel", {"reason": "duplicate signup"})
    with engine.connect() as conn:
        assert job_row(conn, job_id).status == "cancelled"
    assert "Cancelled job" in operator.get(f"/jobs/{job_id}").get_data(as_text=True)


def test_bulk_preview_then_confirm_is_capped_and_idempotent(
    operator: Browser, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.insert(webhook_endpoints).values(
                name="crm", url="https://crm.example", secret="s", paused=True
            )
        )
        ids = [dead_job(conn) for _ in range(4)]
        dead_job(conn, job_type="email.send", last_error="SMTP 550 nope")
        fp = job_row(conn, ids[0]).error_fingerprint
    preview = operator.get(f"/dead/bulk?action=retry&scope=all&fingerprint={fp}&next=/dead")
    html = preview.get_data(as_text=True)
    assert preview.status_code == 200
    assert "Retry 4 dead jobs?" in html
    assert "4 jobs target a paused webhook endpoint" in html
    assert 'hx-confirm="Retry 4 jobs?"' in html
    form = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', html))
    assert form["low"] == str(ids[0])
    assert form["high"] == str(ids[-1])
    form.pop("csrf_token")
    response = operator.post("/dead/bulk", form)
    assert response.status_code == 303
    assert response.headers["Location"] == "/dead"
    assert "Requeued 4 jobs." in operator.get("/dead").get_data(as_text=True)
    operator.post("/dead/bulk", form)
    assert "Requeued 0 jobs." in operator.get("/dead").get_data(as_text=True)
    assert count(engine, jobs.c.retried_from_id.is_not(None)) == 4


def test_bulk_over_selected_ids_and_ignore(operator: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        ids = [dead_job(conn) for _ in range(3)]
    query = "&".join(f"ids={i}" for i in ids[:2])
    preview = operator.get(f"/dead/bulk?action=ignore&{query}").get_data(as_text=True)
    assert "Ignore 2 dead jobs?" in preview
    response = operator.post(
        "/dead/bulk",
        {
            "action": "ignore",
            "ids": [str(i) for i in ids[:2]],
            "reason": "load test noise",
            "next": "/jobs",
        },
    )
    assert response.headers["Location"] == "/jobs"
    assert "Ignored 2 jobs." in operator.get("/jobs").get_data(as_text=True)
    missing_reason = operator.post("/dead/bulk", {"action": "ignore", "ids": str(ids[2])})
    assert missing_reason.status_code == 303
    assert "reason is required" in operator.get("/dead").get_data(as_text=True)
    too_many = operator.post(
        "/dead/bulk", {"action": "retry", "ids": [str(i) for i in range(1, 1002)]}
    )
    assert too_many.status_code == 303
    assert "at most 1,000" in operator.get("/dead").get_data(as_text=True)
    no_range = operator.post("/dead/bulk", {"action": "retry", "scope": "all", "type": "x.y"})
    assert no_range.status_code == 303
    assert "open the preview again" in operator.get("/dead").get_data(as_text=True)


def test_endpoint_pause_resume_and_breaker_close(admin: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.insert(webhook_endpoints).values(name="crm", url="https://crm.example", secret="s")
        )
        conn.execute(
            sa.insert(circuit_breakers).values(
                key="webhook:crm", state="open", consecutive_failures=7
            )
        )
    page = admin.get("/endpoints").get_data(as_text=True)
    assert "7 failures in a row" in page
    admin.post(
        "/endpoints/crm/pause",
        {"reason": "CRM maintenance", "duration": "1h", "next": "/endpoints"},
    )
    page = admin.get("/endpoints").get_data(as_text=True)
    assert "Paused endpoint crm" in page
    assert "CRM maintenance" in page
    admin.post("/endpoints/crm/resume", {})
    assert "Resumed endpoint crm" in admin.get("/endpoints").get_data(as_text=True)
    admin.post("/breakers/close", {"key": "webhook:crm"})
    assert "Closed circuit breaker webhook:crm" in admin.get("/endpoints").get_data(as_text=True)
    admin.post("/endpoints/crm/pause", {"reason": "", "duration": "1h"})
    assert "reason is required" in admin.get("/endpoints").get_data(as_text=True)
    admin.post("/endpoints/crm/pause", {"reason": "x", "duration": "99d"})
    assert "duration must be one of" in admin.get("/endpoints").get_data(as_text=True)
    admin.post("/endpoints/nope/pause", {"reason": "x"})
    assert "no webhook endpoint named" in admin.get("/endpoints").get_data(as_text=True)
    with engine.connect() as conn:
        actions = sorted(conn.execute(sa.select(audit_log.c.action).where(NOT_USERS)).scalars())
    assert actions == ["breaker.close", "endpoint.pause", "endpoint.resume"]


def test_acknowledge_an_alert(operator: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        alert_id = conn.execute(
            sa.insert(alerts)
            .values(rule="queue_stalled", subject="queue:email", message="email waits 20 min")
            .returning(alerts.c.id)
        ).scalar_one()
    operator.post(f"/alerts/{alert_id}/acknowledge", {"note": ""})
    assert "Not acknowledged" in operator.get("/alerts").get_data(as_text=True)
    operator.post(f"/alerts/{alert_id}/acknowledge", {"note": "SMTP provider incident"})
    page = operator.get("/alerts").get_data(as_text=True)
    assert "Acknowledged alert" in page
    assert "SMTP provider incident" in page
    with engine.connect() as conn:
        assert conn.execute(sa.select(audit_log.c.action).where(NOT_USERS)).scalar_one() == (
            "alert.acknowledge"
        )


def test_audit_log_filters(operator: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        first, second = dead_job(conn), dead_job(conn)
    operator.post(f"/jobs/{first}/retry", {})
    operator.post(f"/jobs/{second}/ignore", {"reason": "spam"})
    everything = operator.get("/audit").get_data(as_text=True)
    assert "retry" in everything
    assert "spam" in everything
    only_ignore = operator.get("/audit?action=ignore").get_data(as_text=True)
    assert f'href="/jobs/{first}"' not in only_ignore
    assert f'href="/jobs/{second}"' in only_ignore
    by_job = operator.get(f"/audit?job={first}&actor=otto").get_data(as_text=True)
    assert f'href="/jobs/{first}"' in by_job
    assert "No audit entry" in operator.get("/audit?actor=nobody").get_data(as_text=True)
