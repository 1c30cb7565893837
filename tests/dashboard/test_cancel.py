"""Cancelling from the dashboard: a running job from its page (a request its worker
carries out), the banner that says who, when and why, roles, and "Cancel all matching…"
with its capped preview."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.operator.commands.cancellation import preview_cancel
from jobdesk.shared.operator.filters import JobFilters
from tests.dashboard.conftest import Browser, dead_job
from tests.factories import job_row, make_job

REPORT = "report.generate"


def running_job(conn: sa.Connection, **fields: object) -> int:
    now = datetime.now(UTC)
    values: dict[str, object] = {
        "job_type": REPORT,
        "status": "running",
        "attempts": 1,
        "locked_by": "worker-1",
        "locked_at": now,
        "started_at": now,
        "lease_token": 7,
        "lease_expires_at": now + timedelta(seconds=30),
    }
    values.update(fields)
    return make_job(conn, **values)


def cancel_audits(engine: sa.Engine) -> list[sa.Row]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                sa.select(audit_log).where(audit_log.c.action == "cancel").order_by(audit_log.c.id)
            )
        )


def test_an_operator_stops_a_running_job_from_its_page(
    operator: Browser, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        job_id = running_job(conn)
    page = operator.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "Stop and cancel this job" in page
    response = operator.post(f"/jobs/{job_id}/cancel", {"reason": "wrong month"})
    assert response.status_code == 303
    page = operator.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert f"Asked the worker running job #{job_id} to stop it" in page
    assert re.search(r"Cancel requested</strong> by otto at <time[^>]*>\d\d:\d\d UTC", page)
    assert "“wrong month”" in page
    assert re.search(r"hard stop by <time[^>]*>\d\d:\d\d:\d\d UTC", page)
    assert "Stop and cancel this job" not in page  # asked once is enough
    with engine.connect() as conn:
        row = job_row(conn, job_id)
    assert (row.status, row.cancelled_by, row.cancel_reason) == ("running", "otto", "wrong month")
    again = operator.post(f"/jobs/{job_id}/cancel", {"reason": "again"})
    assert again.status_code == 303
    assert "already has a cancel request by otto" in operator.get(f"/jobs/{job_id}").get_data(
        as_text=True
    )
    ((entry),) = cancel_audits(engine)
    assert (entry.actor, entry.job_id, entry.reason) == ("otto", job_id, "wrong month")


def test_a_cancel_needs_a_reason_and_a_cancellable_job(
    operator: Browser, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        job_id = running_job(conn)
        dead = dead_job(conn)
    operator.post(f"/jobs/{job_id}/cancel", {"reason": "   "})
    page = operator.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "Not cancelled: the reason" in page
    operator.post(f"/jobs/{dead}/cancel", {"reason": "no longer needed"})
    page = operator.get(f"/jobs/{dead}").get_data(as_text=True)
    assert "is dead; only queued, retrying or running jobs can be cancelled" in page
    with engine.connect() as conn:
        assert job_row(conn, job_id).cancel_requested_at is None
    assert cancel_audits(engine) == []


def test_a_viewer_cannot_cancel_and_sees_no_form(viewer: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        job_id = running_job(conn)
    page = viewer.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "Stop and cancel this job" not in page
    assert viewer.post(f"/jobs/{job_id}/cancel", {"reason": "x"}).status_code == 403
    assert "Cancel all matching" not in viewer.get("/jobs?status=running").get_data(as_text=True)
    with engine.connect() as conn:
        assert job_row(conn, job_id).cancel_requested_at is None


def test_a_cancelled_job_shows_who_when_and_why(operator: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        job_id = make_job(conn, job_type=REPORT)
    operator.post(f"/jobs/{job_id}/cancel", {"reason": "duplicate signup"})
    page = operator.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert f"Cancelled job #{job_id}." in page
    assert re.search(
        r"<strong>Cancelled</strong> by otto at <time[^>]*>\d\d:\d\d UTC</time> \(", page
    )
    assert "— “duplicate signup”" in page


def test_cancel_all_matching_previews_then_cancels_and_stops(
    operator: Browser, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        queued = [make_job(conn, job_type=REPORT) for _ in range(3)]
        failed = make_job(conn, job_type=REPORT, status="failed", attempts=1)
        running = running_job(conn)
        asked = running_job(conn, cancel_requested_at=datetime.now(UTC), cancelled_by="kim")
        dead = dead_job(conn, job_type=REPORT)
        done = make_job(conn, job_type=REPORT, status="succeeded")
        other = make_job(conn, job_type="email.send")
    listing = operator.get(f"/jobs?type={REPORT}").get_data(as_text=True)
    assert "Cancel all matching…" in listing
    assert "Cancel all matching" not in operator.get("/jobs?status=dead").get_data(as_text=True)
    preview = operator.get(f"/jobs/cancel?type={REPORT}").get_data(as_text=True)
    assert "Cancel 5 jobs?" in preview
    assert "cancel 4 waiting jobs" in preview
    assert "stop 1 running job" in preview
    low, high = (int(v) for v in re.findall(r'name="(?:low|high)" value="(\d+)"', preview))
    with engine.begin() as conn:  # enqueued after the preview: outside its range
        late = make_job(conn, job_type=REPORT)
    response = operator.post(
        "/jobs/cancel",
        {"type": REPORT, "low": str(low), "high": str(high), "reason": "report rerun tonight"},
    )
    assert response.status_code == 303
    page = operator.get("/jobs").get_data(as_text=True)
    assert "Cancelled 4 jobs. Asked the workers to stop 1 running job." in page
    with engine.connect() as conn:
        status = {
            j: job_row(conn, j).status for j in (*queued, failed, running, dead, done, other, late)
        }
        assert job_row(conn, running).cancelled_by == "otto"
        assert job_row(conn, asked).cancelled_by == "kim"
    assert [status[j] for j in (*queued, failed)] == ["cancelled"] * 4
    assert status[running] == "running"
    assert (status[dead], status[done], status[other], status[late]) == (
        "dead",
        "succeeded",
        "queued",
        "queued",
    )
    entries = cancel_audits(engine)
    assert sorted(e.job_id for e in entries) == sorted([*queued, failed, running])
    assert {e.reason for e in entries} == {"report rerun tonight"}


def test_cancel_all_matching_needs_a_reason_and_its_range(
    operator: Browser, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        job_id = make_job(conn, job_type=REPORT)
    operator.post("/jobs/cancel", {"type": REPORT, "low": str(job_id), "high": str(job_id)})
    assert "Nothing changed: the reason" in operator.get("/jobs").get_data(as_text=True)
    operator.post("/jobs/cancel", {"type": REPORT, "reason": "x"})
    assert "missing its id range" in operator.get("/jobs").get_data(as_text=True)
    with engine.connect() as conn:
        assert job_row(conn, job_id).status == "queued"


def test_the_preview_is_capped(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        ids = [make_job(conn, job_type=REPORT) for _ in range(5)]
        impact = preview_cancel(
            conn, JobFilters(job_type=REPORT), now=datetime.now(UTC) + timedelta(hours=1), cap=2
        )
    assert (impact.matching, impact.selected, impact.capped) == (5, 2, True)
    assert impact.id_range == (ids[0], ids[1])
