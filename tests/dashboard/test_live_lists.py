"""Live pages: the remembered refresh choice, the "N new since you loaded" polls of the
jobs list, dead letters and alerts (same filters, rows never re-rendered), the shown
rows' status swapped in place, and a bulk retry's link to exactly its new jobs with
their progress; "Retry selected" with nothing ticked answers on the same list."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from jobdesk.shared.alerts.models import alerts
from jobdesk.shared.core.models import jobs
from tests.dashboard.conftest import Browser, dead_job
from tests.factories import job_row, make_job

HTMX = {"HX-Request": "true"}


def poll_url(page: str, element_id: str) -> str:
    found = re.search(rf'<div id="{element_id}"[^>]* hx-get="([^"]+)"', page)
    assert found is not None, f"no poller #{element_id} on the page"
    return html.unescape(found.group(1))


def test_the_refresh_choice_is_remembered_across_pages(viewer: Browser) -> None:
    assert 'hx-trigger="every 5s, jobdesk:visible"' in viewer.get("/queues").get_data(as_text=True)
    chosen = viewer.get("/jobs?refresh=15")
    cookie = next(c for c in chosen.headers.getlist("Set-Cookie") if "jobdesk_refresh" in c)
    assert cookie.startswith("jobdesk_refresh=15;")
    assert "HttpOnly" in cookie
    assert "SameSite=Lax" in cookie
    for url in ("/", "/queues", "/workers", "/alerts", "/dead", "/jobs"):
        page = viewer.get(url).get_data(as_text=True)
        assert 'hx-trigger="every 15s, jobdesk:visible"' in page, url
        assert 'class="active" aria-current="true">15 s</a>' in page, url
    # A poll carrying an older tab's interval does not undo the choice.
    poll = viewer.get("/?refresh=5", headers={**HTMX, "HX-Target": "overview-panels"})
    assert not any("jobdesk_refresh" in c for c in poll.headers.getlist("Set-Cookie"))
    assert "every 15s" in viewer.get("/workers").get_data(as_text=True)
    # Off: nothing polls, on any page.
    viewer.get("/queues?refresh=off")
    for url in ("/", "/queues", "/workers", "/alerts", "/dead", "/jobs"):
        assert "data-poll" not in viewer.get(url).get_data(as_text=True), url
    response = viewer.get("/jobs?refresh=2")
    assert response.status_code == 400
    assert "refresh" in response.get_data(as_text=True)


def test_an_unknown_remembered_value_falls_back_to_the_default(viewer: Browser) -> None:
    viewer.client.set_cookie("jobdesk_refresh", "1")
    assert "every 5s" in viewer.get("/workers").get_data(as_text=True)


def test_jobs_list_counts_new_matching_jobs_and_updates_shown_states(
    viewer: Browser, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        shown = [make_job(conn, job_type="email.send", queue="email") for _ in range(3)]
        make_job(conn, job_type="report.generate", queue="reports")
    page = viewer.get("/jobs?type=email.send").get_data(as_text=True)
    url = poll_url(page, "job-news")
    assert "type=email.send" in url
    assert "shown=" in url
    quiet = viewer.get(url, headers={**HTMX, "HX-Target": "job-news"}).get_data(as_text=True)
    assert "since you loaded" not in quiet
    with engine.begin() as conn:
        make_job(conn, job_type="email.send", queue="email")
        make_job(conn, job_type="email.send", queue="email")
        make_job(conn, job_type="report.generate", queue="reports")  # another type
        conn.execute(sa.update(jobs).where(jobs.c.id == shown[1]).values(status="running"))
    news = viewer.get(url, headers={**HTMX, "HX-Target": "job-news"})
    body = news.get_data(as_text=True)
    assert news.status_code == 200
    assert "2 new jobs since you loaded" in body
    assert '<a href="/jobs?type=email.send">show</a>' in body
    assert (
        f'<span class="badge status-running" id="job-{shown[1]}-status" '
        'hx-swap-oob="outerHTML">running</span>'
    ) in body
    assert body.count("hx-swap-oob") == 3
    # The rows already on the page are not part of the answer: they never move.
    assert "<tr" not in body


def test_jobs_news_caps_the_count_and_refuses_bad_parameters(
    viewer: Browser, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.insert(jobs),
            [{"job_type": "bulk.import", "payload": {}} for _ in range(1002)],
        )
    body = viewer.get("/jobs/news?type=bulk.import").get_data(as_text=True)
    assert "1,000+ new jobs since you loaded" in body
    for query, field in (
        ("newer_than=-1", "newer_than"),
        ("shown=1,x", "shown"),
        ("shown=" + ",".join(["1"] * 101), "shown"),
        ("status=zombie", "status"),
    ):
        response = viewer.get(f"/jobs/news?{query}")
        assert response.status_code == 400, query
        assert field in response.get_data(as_text=True), query


def test_dead_letters_count_jobs_that_went_dead_since_the_page_loaded(
    viewer: Browser, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        dead_job(conn)
    page = viewer.get("/dead?type=webhook.deliver").get_data(as_text=True)
    url = poll_url(page, "dead-news")
    assert "seen_at=" in url
    assert "type=webhook.deliver" in url
    assert "since you loaded" not in viewer.get(url).get_data(as_text=True)
    later = datetime.now(UTC) + timedelta(seconds=5)
    with engine.begin() as conn:
        dead_job(conn, finished_at=later)
        dead_job(conn, finished_at=later, job_type="email.send")  # filtered out
        dead_job(conn, finished_at=later, resolution="ignored")  # already decided
    body = viewer.get(url).get_data(as_text=True)
    assert "1 new dead job since you loaded" in body
    assert '<a href="/dead?type=webhook.deliver&amp;time=finished">show</a>' in body
    assert viewer.get("/dead/news?type=webhook.deliver").status_code == 400


def test_alerts_count_new_alerts_in_the_same_tab(viewer: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(sa.insert(alerts).values(rule="stuck_queue", subject="q:a", message="a"))
    url = poll_url(viewer.get("/alerts").get_data(as_text=True), "alert-news")
    with engine.begin() as conn:
        conn.execute(sa.insert(alerts).values(rule="stuck_queue", subject="q:b", message="b"))
        conn.execute(
            sa.insert(alerts).values(
                rule="stuck_queue", subject="q:c", message="c", status="resolved"
            )
        )
    body = viewer.get(url).get_data(as_text=True)
    assert "1 new alert since you loaded" in body
    assert '<a href="/alerts?status=open">show</a>' in body


def test_bulk_retry_links_to_exactly_its_new_jobs_and_their_progress(
    operator: Browser, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        group = [dead_job(conn) for _ in range(3)]
        other = dead_job(conn, last_error="SMTP 550 nope", job_type="email.send")
        fp = job_row(conn, group[0]).error_fingerprint
    # An earlier retry by the same operator is not part of the bulk action's jobs.
    operator.post(f"/jobs/{other}/retry", {"next": "/dead"})
    preview = operator.get(f"/dead/bulk?action=retry&scope=all&fingerprint={fp}&next=/dead")
    form = dict(
        re.findall(
            r'<input type="hidden" name="(\w+)" value="([^"]*)">', preview.get_data(as_text=True)
        )
    )
    form.pop("csrf_token")
    assert operator.post("/dead/bulk", form).headers["Location"] == "/dead"
    page = operator.get("/dead").get_data(as_text=True)
    assert "Requeued 3 jobs." in page
    found = re.search(r'<a href="/jobs\?from_audit=(\d+)">Follow the 3 new jobs</a>', page)
    assert found is not None, page
    audit_id = found.group(1)
    assert f'hx-get="/jobs/progress?from_audit={audit_id}"' in page
    with engine.connect() as conn:
        new_ids = sorted(
            conn.execute(sa.select(jobs.c.id).where(jobs.c.retried_from_id.in_(group))).scalars()
        )
    listed = operator.get(f"/jobs?from_audit={audit_id}").get_data(as_text=True)
    assert sorted(int(i) for i in re.findall(r'<tr id="job-(\d+)"', listed)) == new_ids
    assert "Showing the jobs made by one action" in listed
    assert f'<input type="hidden" name="from_audit" value="{audit_id}">' in listed
    progress = operator.get(f"/jobs/progress?from_audit={audit_id}", headers=HTMX)
    assert progress.status_code == 200
    text = progress.get_data(as_text=True)
    assert "3 new jobs:" in text
    assert "3 queued" in text
    assert "3 still to finish" in text
    with engine.begin() as conn:
        conn.execute(sa.update(jobs).where(jobs.c.id == new_ids[0]).values(status="running"))
        conn.execute(sa.update(jobs).where(jobs.c.id == new_ids[1]).values(status="succeeded"))
    text = operator.get(f"/jobs/progress?from_audit={audit_id}").get_data(as_text=True)
    assert "1 queued" in text
    assert "1 running" in text
    assert "1 succeeded" in text
    assert f'href="/jobs?from_audit={audit_id}&amp;status=succeeded"' in text
    with engine.begin() as conn:
        conn.execute(sa.update(jobs).where(jobs.c.id.in_(new_ids)).values(status="succeeded"))
    done = operator.get(f"/jobs/progress?from_audit={audit_id}")
    assert done.status_code == 286  # htmx stops polling
    assert "3 succeeded" in done.get_data(as_text=True)
    assert "(all finished)" in done.get_data(as_text=True)


def test_from_audit_is_validated_and_an_unknown_entry_matches_nothing(
    viewer: Browser, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        make_job(conn)
    response = viewer.get("/jobs?from_audit=abc")
    assert response.status_code == 400
    assert "Bad filter: from_audit" in response.get_data(as_text=True)
    assert "No job matches these filters" in viewer.get("/jobs?from_audit=999").get_data(
        as_text=True
    )
    assert viewer.get("/jobs/progress").status_code == 400
    assert "No job from this action" in viewer.get("/jobs/progress?from_audit=999").get_data(
        as_text=True
    )


def test_retry_selected_with_nothing_ticked_answers_on_the_same_list(
    operator: Browser, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        dead_job(conn)
    response = operator.get("/dead/bulk?action=retry&next=/jobs?status%3Ddead")
    assert response.status_code == 303
    assert response.headers["Location"] == "/jobs?status=dead"
    page = operator.get("/jobs?status=dead").get_data(as_text=True)
    assert "Nothing selected: tick the jobs to act on, then press Retry selected again." in page
    ignore = operator.get("/dead/bulk?action=ignore&next=/jobs?status%3Ddead")
    assert ignore.status_code == 303
    assert "press Ignore selected again" in operator.get("/jobs?status=dead").get_data(as_text=True)
