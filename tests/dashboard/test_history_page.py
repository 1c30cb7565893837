"""The History page: ranges and their buckets, the queue and type filters, an empty
history that says so, bad parameters refused with a 400 that names them."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from jobdesk.shared.core.models import job_attempts
from jobdesk.shared.history.rollup import roll_up
from tests.dashboard.conftest import Browser
from tests.factories import make_job


def finished(
    engine: sa.Engine,
    *,
    ago: timedelta,
    queue: str,
    job_type: str,
    outcome: str = "succeeded",
    wait: float = 1.0,
    status: str = "succeeded",
) -> None:
    now = datetime.now(UTC)
    started = now - ago
    with engine.begin() as conn:
        job_id = make_job(
            conn,
            job_type=job_type,
            queue=queue,
            status=status,
            attempts=1,
            max_attempts=1,
            next_run_at=started - timedelta(seconds=wait),
            started_at=started,
            finished_at=started + timedelta(seconds=1),
        )
        conn.execute(
            sa.insert(job_attempts).values(
                job_id=job_id,
                attempt=1,
                started_at=started,
                finished_at=started + timedelta(seconds=1),
                outcome=outcome,
            )
        )


def bars(html: str) -> int:
    return len(re.findall(r'<rect class="bar', html.split('id="history-charts"')[1])) // 4


def seeded(engine: sa.Engine) -> None:
    finished(engine, ago=timedelta(minutes=10), queue="email", job_type="email.send", wait=4.0)
    finished(engine, ago=timedelta(minutes=12), queue="email", job_type="email.send", wait=2.0)
    finished(
        engine,
        ago=timedelta(hours=5),
        queue="reports",
        job_type="report.build",
        outcome="permanent",
        status="dead",
        wait=3.0,
    )
    finished(engine, ago=timedelta(days=3), queue="webhooks", job_type="webhook.deliver")
    roll_up(engine, datetime.now(UTC))


def test_the_page_is_in_the_navigation_and_empty_history_says_so(viewer: Browser) -> None:
    page = viewer.get("/history")
    html = page.get_data(as_text=True)
    assert page.status_code == 200
    assert 'href="/history" class="active" aria-current="page">History</a>' in html
    assert "Nothing finished in the last 24h" in html
    assert "<svg" not in html.split('id="history-charts"')[1]


def test_a_job_that_just_finished_shows_before_the_rollup_counts_it(
    viewer: Browser, engine: sa.Engine
) -> None:
    finished(engine, ago=timedelta(seconds=5), queue="email", job_type="email.send")
    html = viewer.get("/history?range=1h").get_data(as_text=True)
    assert "Nothing finished" not in html
    assert "1 attempt succeeded" in html
    assert "counted live from the attempts" in html
    assert bars(html) == 60


def test_ranges_have_their_buckets_axes_and_text_alternatives(
    viewer: Browser, engine: sa.Engine
) -> None:
    seeded(engine)
    day = viewer.get("/history").get_data(as_text=True)
    assert bars(day) == 96, "24 h in quarter hours"
    assert "Attempts succeeded (per 15 minutes)" in day
    assert "Time (UTC), one bar per 15 minutes" in day
    assert (
        'role="img" aria-label="Attempts succeeded per 15 minutes over the last 24h: 2 in all'
        in day
    )
    assert "Jobs that went dead per 15 minutes over the last 24h: 1 in all" in day
    assert 'aria-label="Queue wait per 15 minutes over the last 24h: mean 3 s, longest 4 s"' in day
    assert '<span class="tick-top">2</span><span class="tick-mid">1</span>' in day
    assert "webhook.deliver" not in day, "3 days ago is outside 24 h"

    hour = viewer.get("/history?range=1h").get_data(as_text=True)
    assert bars(hour) == 60
    assert "Time (UTC), one bar per minute" in hour
    assert "report.build" not in hour

    week = viewer.get("/history?range=7d").get_data(as_text=True)
    assert bars(week) == 84
    assert '<option value="webhook.deliver">webhook.deliver</option>' in week
    assert "4 attempts succeeded" not in week
    assert "3 attempts succeeded" in week


def test_queue_and_type_filters_narrow_the_charts(viewer: Browser, engine: sa.Engine) -> None:
    seeded(engine)
    page = viewer.get("/history?range=7d&queue=reports").get_data(as_text=True)
    assert '<option value="reports" selected>reports</option>' in page
    assert "0 attempts succeeded, 1 attempt failed, 1 job went dead" in page
    typed = viewer.get("/history?range=7d&type=email.send").get_data(as_text=True)
    assert "2 attempts succeeded, 0 attempts failed" in typed
    nothing = viewer.get("/history?queue=nowhere").get_data(as_text=True)
    assert "Nothing finished in the last 24h for this queue and type." in nothing
    assert '<option value="nowhere" selected>nowhere</option>' in nothing
    fragment = viewer.get(
        "/history?range=1h", headers={"HX-Request": "true", "HX-Target": "history-charts"}
    ).get_data(as_text=True)
    assert "<html" not in fragment
    assert "Time (UTC), one bar per minute" in fragment


def test_bad_parameters_are_refused_naming_them(viewer: Browser) -> None:
    for query, name in (
        ("range=30d", "range"),
        ("queue=Bad Queue", "queue"),
        ("type=" + "x" * 101, "type"),
    ):
        response = viewer.get(f"/history?{query}")
        assert response.status_code == 400, query
        assert name in response.get_data(as_text=True)


def test_times_are_on_the_viewers_clock(viewer: Browser, engine: sa.Engine) -> None:
    seeded(engine)
    viewer.client.set_cookie("jobdesk_tz", "Asia/Kolkata")
    page = viewer.get("/history?range=1h").get_data(as_text=True)
    assert "Time (IST), one bar per minute" in page
    charts = page.split('id="history-charts"')[1]
    labels = re.findall(r'<text class="axis"[^>]*>([^<]*)</text>', charts)
    assert labels
    # One-minute buckets start on UTC minutes, which are whole minutes in India too.
    assert all(re.fullmatch(r"\d\d:\d\d", label) for label in labels)
    assert re.search(r"<title>\d\d:\d\d IST: 0 attempts succeeded</title>", charts)
    assert "times in IST" in charts
