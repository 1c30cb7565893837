"""The redrive pages: "Redrive slowly…" on an error group and on a filtered dead-letter
list, the form and its refusals, the list and a redrive's page with progress, the
controls (pause / resume / cancel with reasons), polling that stops once a redrive has
ended, and what a viewer sees."""

from __future__ import annotations

import html
import re
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.core.masking import fingerprint
from jobdesk.shared.core.models import job_attempts, jobs
from jobdesk.shared.redrives.models import redrive_items, redrives
from jobdesk.shared.redrives.stepper import redrive_step
from tests.dashboard.conftest import NOW, Browser, dead_job

ERROR = "TimeoutError: POST https://crm.example/hook timed out after 10s"
GROUP = fingerprint(ERROR)


def dead_group(engine: sa.Engine, count: int = 3, **fields: Any) -> list[int]:
    with engine.begin() as conn:
        return [dead_job(conn, last_error=ERROR, **fields) for _ in range(count)]


def text_of(response: Any) -> str:
    return html.unescape(re.sub(r"\s+", " ", response.get_data(as_text=True)))


def words(response: Any) -> str:
    """What a person reads: the page without its tags."""
    return re.sub(
        r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", response.get_data(as_text=True)))
    )


def start(operator: Browser, **form: str) -> Any:
    data = {
        "fingerprint": GROUP,
        "rate": "60",
        "stop_failures": "5",
        "stop_window": "20",
        "reason": "CRM is back",
        **form,
    }
    return operator.post("/redrives", data)


def step(engine: sa.Engine, redrive_id: int, seconds: float) -> None:
    with engine.begin() as conn:
        redrive_step(conn, redrive_id, now=NOW + timedelta(seconds=seconds))


@pytest.mark.one_database
def test_an_error_group_offers_a_slow_redrive_beside_retry_all(
    operator: Browser, viewer: Browser, engine: sa.Engine
) -> None:
    dead_group(engine)
    page = operator.get("/dead").get_data(as_text=True)
    assert f'href="/redrives/new?next=/dead&amp;time=finished&amp;fingerprint={GROUP}"' in page
    assert ">Redrive slowly…</a>" in page
    assert "Redrive all matching slowly" not in page  # unfiltered: per group only
    filtered = operator.get("/dead?type=webhook.deliver").get_data(as_text=True)
    assert "Redrive all matching slowly…" in filtered
    assert "Redrive slowly…" not in viewer.get("/dead").get_data(as_text=True)


@pytest.mark.one_database
def test_the_form_previews_what_it_takes_on(operator: Browser, engine: sa.Engine) -> None:
    dead_group(engine, 3)
    response = operator.get(f"/redrives/new?fingerprint={GROUP}&next=/dead")
    assert response.status_code == 200
    page = text_of(response)
    assert "Redrive 3 dead jobs slowly?" in page
    assert f"match error group {GROUP} (“TimeoutError: POST https://crm.example/hook" in words(
        response
    )
    assert 'name="rate" value="60"' in page
    assert 'name="stop_failures" value="5"' in page
    assert 'name="stop_window" value="20"' in page
    assert f'<input type="hidden" name="fingerprint" value="{GROUP}">' in page
    nothing = text_of(operator.get("/redrives/new?type=email.send"))
    assert "Nothing to redrive" in nothing
    assert "Start redrive" not in nothing
    refused = operator.get("/redrives/new")
    assert refused.status_code == 400
    assert "choose what to redrive" in text_of(refused)


def test_an_operator_starts_pauses_resumes_and_cancels(
    operator: Browser, engine: sa.Engine
) -> None:
    dead_group(engine, 3)
    response = start(operator, rate="120", stop_failures="2", stop_window="4")
    assert response.status_code == 303
    assert response.headers["Location"] == "/redrives/1"
    page = text_of(operator.get("/redrives/1"))
    assert "Started redrive #1: 3 dead jobs at 120 per minute, stopping if 2 of 4 new jobs" in page
    assert "0 of 3 requeued, 0 failed again" in page
    assert "120 per minute · stops if 2 of 4 new jobs fail again" in page
    assert "“CRM is back”" in page
    with engine.connect() as conn:
        row = conn.execute(sa.select(redrives)).one()
    step(engine, 1, (row.next_at - NOW).total_seconds())
    listing = text_of(operator.get("/redrives"))
    assert "1 of 3 requeued, 0 failed again, 1 waiting for a first outcome" in listing
    assert 'aria-label="Reason for pausing redrive #1"' in listing

    paused = operator.post("/redrives/1/pause", {"reason": "CRM slow again", "next": "/redrives"})
    assert (paused.status_code, paused.headers["Location"]) == (303, "/redrives")
    listing = text_of(operator.get("/redrives"))
    assert "Paused redrive #1: nothing more is requeued until it is resumed." in listing
    assert "paused by otto" in listing
    assert "“CRM slow again”" in listing
    again = operator.post("/redrives/1/pause", {"reason": "x"})
    assert again.status_code == 303
    assert "Redrive #1 not paused: redrive #1 is paused; only a running redrive can be" in (
        text_of(operator.get("/redrives/1"))
    )
    assert operator.post("/redrives/1/resume", {}).status_code == 303
    refused = operator.post("/redrives/1/cancel", {"reason": ""})
    assert refused.status_code == 303
    assert "Redrive #1 not cancelled: the reason is required" in text_of(
        operator.get("/redrives/1")
    )
    assert operator.post("/redrives/1/cancel", {"reason": "enough for today"}).status_code == 303
    page = words(operator.get("/redrives/1"))
    assert "Cancelled redrive #1: the dead jobs it had not reached stay dead" in page
    assert "Cancelled by otto" in page
    assert "Why cancel" not in page  # no controls on an ended redrive
    with engine.connect() as conn:
        actions = list(
            conn.execute(
                sa.select(audit_log.c.action)
                .where(audit_log.c.subject == "redrive:1", audit_log.c.action != "retry")
                .order_by(audit_log.c.id)
            ).scalars()
        )
    assert actions == ["redrive.start", "redrive.pause", "redrive.resume", "redrive.cancel"]


@pytest.mark.one_database
@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"rate": "0"}, "Redrive not started: the rate must be from 1 to 10,000 jobs per minute"),
        ({"rate": "fast"}, "Redrive not started: the rate 'fast' is not a rate like 60/min"),
        ({"stop_failures": "9", "stop_window": "4"}, "9 failures of 4 jobs can never happen"),
        ({"stop_window": ""}, "Redrive not started: the stop_window is required"),
        ({"reason": " "}, "Redrive not started: the reason is required"),
        ({"fingerprint": "", "type": "email.send"}, "no dead job that needs a decision matches"),
        ({"fingerprint": ""}, "choose what to redrive"),
    ],
)
def test_a_refused_start_goes_back_to_the_form_saying_why(
    operator: Browser, engine: sa.Engine, form: dict[str, str], message: str
) -> None:
    dead_group(engine, 1)
    back = f"/redrives/new?fingerprint={GROUP}"
    response = start(operator, next=back, **form)
    assert (response.status_code, response.headers["Location"]) == (303, back)
    assert message in text_of(operator.get(back))
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(redrives)).scalar() == 0


def test_a_redrive_that_stopped_says_why_and_lists_what_failed_again(
    operator: Browser, engine: sa.Engine
) -> None:
    dead_group(engine, 4)
    start(operator, rate="600", stop_failures="1", stop_window="2")
    with engine.connect() as conn:
        next_at = conn.execute(sa.select(redrives.c.next_at)).scalar_one()
    step(engine, 1, (next_at - NOW).total_seconds() + 1)  # the first two
    with engine.begin() as conn:
        new_id = conn.execute(sa.select(sa.func.max(jobs.c.id))).scalar_one()
        conn.execute(
            sa.insert(job_attempts).values(
                job_id=new_id, attempt=1, outcome="failed", error="TimeoutError: <b>again</b>"
            )
        )
        conn.execute(
            sa.update(jobs)
            .where(jobs.c.id == new_id)
            .values(status="failed", last_error="TimeoutError: <b>again</b>")
        )
    step(engine, 1, (next_at - NOW).total_seconds() + 2)
    response = operator.get("/redrives/1")
    raw = response.get_data(as_text=True)
    assert "<b>again</b>" not in raw  # escaped
    page = text_of(response)
    assert "Stopped by its rule: 1 of the first 1 new jobs failed again" in page
    assert f'href="/jobs/{new_id}"' in raw
    assert "TimeoutError: <b>again</b>" in page
    # A poll of an ended redrive answers its summary and stops polling (286).
    poll = operator.get(
        "/redrives/1", headers={"HX-Request": "true", "HX-Target": "redrive-summary"}
    )
    assert poll.status_code == 286
    assert "<html" not in poll.get_data(as_text=True)


@pytest.mark.one_database
def test_a_running_redrive_keeps_polling_and_a_viewer_sees_no_controls(
    operator: Browser, viewer: Browser, engine: sa.Engine
) -> None:
    dead_group(engine, 2)
    start(operator)
    poll = operator.get(
        "/redrives/1", headers={"HX-Request": "true", "HX-Target": "redrive-summary"}
    )
    assert poll.status_code == 200
    page = viewer.get("/redrives/1").get_data(as_text=True)
    assert 'id="redrive-summary"' in page
    assert "data-poll" in page
    assert "Reason for pausing" not in page
    assert "Reason for pausing" not in viewer.get("/redrives").get_data(as_text=True)
    assert viewer.post("/redrives/1/pause", {"reason": "x"}).status_code == 403
    assert viewer.get(f"/redrives/new?fingerprint={GROUP}").status_code == 403
    assert operator.get("/redrives/99").status_code == 404


@pytest.mark.one_database
def test_the_list_pages_by_id_and_says_when_there_is_none(
    operator: Browser, engine: sa.Engine
) -> None:
    assert "No redrive yet." in text_of(operator.get("/redrives"))
    dead_group(engine, 1)
    start(operator)
    table = operator.get("/redrives", headers={"HX-Request": "true", "HX-Target": "redrive-table"})
    assert "<html" not in table.get_data(as_text=True)
    assert 'id="redrive-1"' in table.get_data(as_text=True)
    assert "No older redrive." in text_of(operator.get("/redrives?before=1"))
    nav = operator.get("/").get_data(as_text=True)
    assert 'href="/redrives">Redrives</a>' in nav


def test_the_jobs_list_shows_exactly_the_new_jobs_of_one_redrive(
    operator: Browser, engine: sa.Engine
) -> None:
    dead_group(engine, 3)
    other_error = "SMTPServerDisconnected: Connection unexpectedly closed"
    with engine.begin() as conn:
        for _ in range(2):
            dead_job(conn, job_type="email.send", queue="email", last_error=other_error)
    assert start(operator, rate="120").status_code == 303  # redrive #1: the webhooks
    assert start(operator, fingerprint=fingerprint(other_error)).status_code == 303  # #2
    for redrive_id in (1, 2):
        with engine.connect() as conn:
            due = conn.execute(sa.select(redrives.c.next_at).where(redrives.c.id == redrive_id))
        step(engine, redrive_id, (due.scalar_one() - NOW).total_seconds())
    with engine.connect() as conn:
        items = redrive_items.c
        requeued = conn.execute(
            sa.select(items.redrive_id, items.new_job_id).where(items.new_job_id.is_not(None))
        ).all()
    of_first = {job for redrive_id, job in requeued if redrive_id == 1}
    assert of_first
    assert len(requeued) > len(of_first)  # the other redrive's are there too
    page = operator.get("/redrives/1").get_data(as_text=True)
    assert f'<a href="/jobs?redrive=1">{len(of_first)} requeued</a>' in page
    listed = operator.get("/jobs?redrive=1")
    assert listed.status_code == 200
    assert "Showing the new jobs redrive #1 requeued so far." in words(listed)
    shown = {int(n) for n in re.findall(r'href="/jobs/(\d+)"', listed.get_data(as_text=True))}
    assert shown == of_first
    assert 'name="redrive" value="1"' in listed.get_data(as_text=True)
    assert operator.get("/jobs?redrive=0").status_code == 400
