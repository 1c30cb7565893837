"""Times in the viewer's zone: the operator's own setting, else the zone the browser
reports in its cookie, else UTC — on full pages and the htmx fragments that refresh
them alike, with UTC in every time's title and the zone beside every absolute time."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import sqlalchemy as sa
from flask import Flask

from jobdesk.shared.core import audit
from jobdesk.shared.core.audit import AuditAction
from jobdesk.shared.operator.commands.accounts import require_operator
from jobdesk.shared.schedules.models import schedules
from jobdesk.shared.schedules.store import sync_declared
from jobdesk.worker.schedules import ScheduleSpec
from tests.dashboard.conftest import Browser, dead_job

NEW_YORK = ZoneInfo("America/New_York")
TOKYO = ZoneInfo("Asia/Tokyo")
_ZONE_META = re.compile(r'<meta name="jobdesk-zone" content="([^"]*)" data-source="([^"]*)"')


def _zone_of(page: str) -> tuple[str, str]:
    found = _ZONE_META.search(page)
    assert found, "the page names the zone it was rendered in"
    return found.group(1), found.group(2)


def _clock(moment: datetime, zone: ZoneInfo) -> str:
    """The wall-clock part the page shows ("09:05:00 EST"), without the date."""
    local = moment.astimezone(zone)
    return f"{local:%H:%M:%S} {local:%Z}"


def _finished_job(engine: sa.Engine) -> tuple[int, datetime]:
    finished = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=30)
    with engine.begin() as conn:
        job_id = dead_job(conn, finished_at=finished, created_at=finished - timedelta(hours=1))
    return job_id, finished


def test_without_a_setting_or_a_cookie_times_are_utc_and_say_so(
    operator: Browser, engine: sa.Engine
) -> None:
    job_id, finished = _finished_job(engine)
    page = operator.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert _zone_of(page) == ("UTC", "default")
    assert f"{finished:%H:%M:%S} UTC" in page
    utc = f'datetime="{finished:%Y-%m-%dT%H:%M:%SZ}" title="{finished:%Y-%m-%d %H:%M:%S} UTC"'
    assert f"<time {utc}>" in page


def test_the_browsers_zone_from_its_cookie_with_utc_on_hover(
    operator: Browser, engine: sa.Engine
) -> None:
    job_id, finished = _finished_job(engine)
    operator.client.set_cookie("jobdesk_tz", "America/New_York")
    page = operator.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert _zone_of(page) == ("America/New_York", "browser")
    finished_row = re.search(r"<dt>Finished</dt><dd>(.*?)</dd>", page, re.S)
    assert finished_row
    cell = finished_row.group(1)
    # Relative, then the absolute New York time beside it; hover gives UTC.
    assert "30 min ago" in cell
    assert _clock(finished, NEW_YORK) in cell
    assert f'title="{finished:%Y-%m-%d %H:%M:%S} UTC"' in cell
    assert f'datetime="{finished:%Y-%m-%dT%H:%M:%SZ}"' in cell


def test_a_cookie_naming_no_known_zone_is_ignored(operator: Browser, engine: sa.Engine) -> None:
    job_id, finished = _finished_job(engine)
    for junk in ("Mars/Olympus_Mons", "../../etc/passwd", "Europe/Berlin\\x00", ""):
        operator.client.set_cookie("jobdesk_tz", junk)
        response = operator.get(f"/jobs/{job_id}")
        assert response.status_code == 200
        page = response.get_data(as_text=True)
        assert _zone_of(page) == ("UTC", "default")
        assert f"{finished:%H:%M:%S} UTC" in page


def test_an_operators_own_setting_wins_over_the_browser(viewer: Browser, engine: sa.Engine) -> None:
    job_id, finished = _finished_job(engine)
    viewer.client.set_cookie("jobdesk_tz", "America/New_York")
    settings = viewer.get("/settings").get_data(as_text=True)
    assert '<strong id="zone-in-use">America/New_York</strong> (your browser' in settings
    response = viewer.post("/settings", {"timezone": "Asia/Tokyo"})
    assert response.status_code == 303
    settings = viewer.get(response.headers["Location"]).get_data(as_text=True)
    assert "Times are now shown in Asia/Tokyo." in settings
    assert '<strong id="zone-in-use">Asia/Tokyo</strong> (your setting)' in settings
    assert 'value="Asia/Tokyo"' in settings
    page = viewer.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert _zone_of(page) == ("Asia/Tokyo", "setting")
    assert _clock(finished, TOKYO) in page
    assert _clock(finished, NEW_YORK) not in page
    with engine.connect() as conn:
        assert require_operator(conn, "vera").timezone == "Asia/Tokyo"
        # Nobody else's view changes.
        assert require_operator(conn, "otto").timezone is None

    # Cleared: the browser's zone applies again.
    assert viewer.post("/settings", {"timezone": ""}).status_code == 303
    page = viewer.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert _zone_of(page) == ("America/New_York", "browser")
    with engine.connect() as conn:
        assert require_operator(conn, "vera").timezone is None


def test_a_zone_the_server_does_not_know_is_refused_next_to_the_field(
    operator: Browser, engine: sa.Engine
) -> None:
    operator.post("/settings", {"timezone": "Europe/Berlin"})
    response = operator.post("/settings", {"timezone": "Europe/Atlantis"})
    assert response.status_code == 422
    page = response.get_data(as_text=True)
    assert re.search(
        r'<p class="field-error" id="timezone-error" role="alert">Time zone: '
        r"&#39;Europe/Atlantis&#39; is not a time zone this server knows; use an IANA name",
        page,
    )
    assert 'value="Europe/Atlantis"' in page
    assert 'aria-invalid="true"' in page
    assert 'aria-describedby="timezone-help timezone-error"' in page
    with engine.connect() as conn:
        assert require_operator(conn, "otto").timezone == "Europe/Berlin"


def test_the_settings_page_is_every_roles_own_and_linked_from_the_top_bar(
    viewer: Browser, app: Flask
) -> None:
    page = viewer.get("/").get_data(as_text=True)
    assert '<a href="/settings">Settings</a>' in page
    settings = viewer.get("/settings")
    assert settings.status_code == 200
    assert '<datalist id="zone-names">' in settings.get_data(as_text=True)
    anonymous = app.test_client().get("/settings")
    assert anonymous.status_code == 303


def test_htmx_fragments_use_the_same_zone_as_the_page(operator: Browser, engine: sa.Engine) -> None:
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    with engine.begin() as conn:
        audit.record(conn, actor="otto", action=AuditAction.QUEUE_PAUSE, subject="queue:email",
                     reason="maintenance", now=at)  # fmt: skip
    operator.client.set_cookie("jobdesk_tz", "Asia/Tokyo")
    page = operator.get("/audit").get_data(as_text=True)
    fragment = operator.get(
        "/audit", headers={"HX-Request": "true", "HX-Target": "audit-results"}
    ).get_data(as_text=True)
    assert "<html" not in fragment
    for body in (page, fragment):
        assert _clock(at, TOKYO) in body
        assert f'title="{at:%Y-%m-%d %H:%M:%S} UTC"' in body


def test_the_dead_letter_trend_labels_hours_on_the_viewers_clock(
    operator: Browser, engine: sa.Engine
) -> None:
    operator.client.set_cookie("jobdesk_tz", "Asia/Kolkata")
    page = operator.get("/dead").get_data(as_text=True)
    chart = re.search(r'<svg class="trend".*?</svg>', page, re.S)
    assert chart
    assert 'aria-label="Jobs that went dead per hour over the last 24 hours (hours in IST)"' in (
        chart.group(0)
    )
    labels = re.findall(r'<text class="axis"[^>]*>([^<]*)</text>', chart.group(0))
    # Buckets start on UTC hours: 30 minutes past on an Indian clock (UTC+05:30).
    assert labels
    assert all(re.fullmatch(r"\d\d:30", label) for label in labels)
    assert re.search(r"<title>\d\d:30 IST: 0 jobs went dead</title>", chart.group(0))


def test_a_schedules_next_run_shows_its_own_zone_and_the_viewers(
    viewer: Browser, engine: sa.Engine
) -> None:
    nightly = ScheduleSpec("report.nightly", "report.generate", {}, cron="0 2 * * *",
                           tz="Europe/Berlin")  # fmt: skip
    with engine.begin() as conn:
        sync_declared(conn, [nightly.declared(datetime.now(UTC))], now=datetime.now(UTC))
        next_run = conn.execute(sa.select(schedules.c.next_run_at)).scalar_one()
    row = re.compile(r'<tr id="schedule-report.nightly">(.*?)</tr>', re.S)
    berlin = next_run.astimezone(ZoneInfo("Europe/Berlin"))
    assert f"{berlin:%H:%M:%S}" == "02:00:00"  # the cron's own clock

    viewer.client.set_cookie("jobdesk_tz", "Europe/Berlin")
    found = row.search(viewer.get("/schedules").get_data(as_text=True))
    assert found
    assert f"{berlin:%Y-%m-%d} 02:00:00</time>" in found.group(1)
    assert '<span class="small muted">Europe/Berlin</span>' in found.group(1)
    assert f"02:00:00 {berlin:%Z}" not in found.group(1)  # the same clock is not repeated

    viewer.client.set_cookie("jobdesk_tz", "Asia/Tokyo")
    found = row.search(viewer.get("/schedules").get_data(as_text=True))
    assert found
    assert f"{berlin:%Y-%m-%d} 02:00:00</time>" in found.group(1)
    assert f"{next_run.astimezone(TOKYO):%H:%M:%S} JST" in found.group(1)
    assert f'title="{next_run.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"' in found.group(1)
