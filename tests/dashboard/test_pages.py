"""Read-side pages: overview, jobs list (filters, search, keyset pages, bad params), job
detail (attempts, lineage, group lane, deliveries, audit), dead-letter groups."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from jobdesk.shared.alerts.models import alerts
from jobdesk.shared.core.models import job_attempts
from jobdesk.shared.webhooks.models import webhook_deliveries
from tests.dashboard.conftest import NOW, Browser, dead_job
from tests.factories import make_job


def test_overview_counts_ages_trend_and_fragment(viewer: Browser, engine: sa.Engine) -> None:
    # The age shown is measured from the page's own clock: take "now" here, not from the
    # conftest import (which can be minutes before this test runs in a long session).
    now = datetime.now(UTC)
    with engine.begin() as conn:
        for _ in range(3):
            make_job(
                conn, job_type="email.send", queue="email", next_run_at=now - timedelta(minutes=10)
            )
        dead_job(conn, finished_at=now - timedelta(hours=2))
        make_job(conn, job_type="email.send", queue="email", status="succeeded")
    page = viewer.get("/")
    html = page.get_data(as_text=True)
    assert page.status_code == 200
    assert "Jobs by queue and type" in html
    assert 'href="/jobs?queue=email&amp;type=email.send&amp;status=queued">3</a>' in html
    assert "Dead, needs a decision" in html
    assert "went dead" in html
    assert '<svg class="trend"' in html
    assert "10 min" in html
    assert 'hx-trigger="every 5s, jobdesk:visible"' in html
    fragment = viewer.get(
        "/?refresh=15", headers={"HX-Request": "true", "HX-Target": "overview-panels"}
    )
    body = fragment.get_data(as_text=True)
    assert "<html" not in body
    assert "Jobs by queue and type" in body
    assert "<html" in viewer.get(
        "/", headers={"HX-Request": "true", "HX-Boosted": "true"}
    ).get_data(as_text=True)
    assert viewer.get("/?refresh=1").status_code == 400


def test_overview_alerts_say_when_they_opened_and_when_they_were_last_seen(
    viewer: Browser, engine: sa.Engine
) -> None:
    now = datetime.now(UTC)
    with engine.begin() as conn:
        conn.execute(
            sa.insert(alerts).values(
                rule="stuck_queue", subject="queue:email", message="queue email is stuck",
                opened_at=now - timedelta(minutes=7), last_seen_at=now - timedelta(seconds=20),
            )
        )  # fmt: skip
    html = viewer.get("/").get_data(as_text=True)
    text = re.sub(r"<[^>]+>", "", html.split("<h2>Open alerts")[1].split("</section>")[0])
    assert re.search(r"queue email is stuck\s+opened 7 min ago · last seen 2\d s ago", text)


def test_jobs_list_filters_and_keyset_pages(viewer: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        ids = [make_job(conn, job_type="report.generate", queue="reports") for _ in range(30)]
        make_job(conn, job_type="email.send", queue="email")
    first = viewer.get("/jobs?type=report.generate&page_size=25").get_data(as_text=True)
    assert first.count('<tr id="job-') == 25
    assert f'href="/jobs/{ids[-1]}"' in first
    assert "email.send" not in first.split("<tbody>")[1]
    start = first.index("after=") + len("after=")
    cursor = first[start : first.index("&", start)]
    second = viewer.get(f"/jobs?after={cursor}&type=report.generate&page_size=25").get_data(
        as_text=True
    )
    assert second.count('<tr id="job-') == 5
    assert f'href="/jobs/{ids[0]}"' in second
    assert "First page" in second
    oldest = viewer.get("/jobs?sort=oldest&page_size=25").get_data(as_text=True)
    assert oldest.index(f'href="/jobs/{ids[0]}"') < oldest.index(f'href="/jobs/{ids[1]}"')
    by_time = viewer.get("/jobs?sort=next_run&page_size=25").get_data(as_text=True)
    start = by_time.index("after=") + len("after=")
    cursor = by_time[start : by_time.index("&", start)]
    rest = viewer.get(f"/jobs?sort=next_run&page_size=25&after={cursor}").get_data(as_text=True)
    assert rest.count('<tr id="job-') == 6


def test_jobs_fragment_for_htmx(viewer: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        make_job(conn, job_type="email.send")
    response = viewer.get(
        "/jobs?type=email.send", headers={"HX-Request": "true", "HX-Target": "job-results"}
    )
    body = response.get_data(as_text=True)
    assert "<html" not in body
    assert "email.send" in body
    assert "HX-Request" in response.headers["Vary"]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("status=zombie", "status"),
        ("page_size=1000", "page_size"),
        ("sort=payload", "sort"),
        ("type=Bad Type", "type"),
        ("error=ab", "error"),
        ("error=" + "x" * 201, "error"),
        ("range=99y", "range"),
        ("since=yesterday", "since"),
        ("after=garbage", "after"),
        ("after=WyJvbGRlc3QiLDEsMV0", "after"),
        ("group=" + "g" * 201, "group"),
        ("fingerprint=xyz", "fingerprint"),
        ("since=2026-01-02&until=2026-01-01", "until"),
    ],
)
def test_bad_list_parameters_are_refused_by_name(viewer: Browser, query: str, field: str) -> None:
    response = viewer.get(f"/jobs?{query}")
    assert response.status_code == 400
    assert f"Bad filter: {field}" in response.get_data(as_text=True)


@pytest.mark.parametrize(
    "url",
    [
        "/audit?page_size=7",
        "/audit?action=drop",
        "/audit?job=abc",
        "/alerts?status=x",
        "/dead?sort=zzz",
        "/dead/bulk?action=explode&ids=1",
        "/dead/bulk?action=retry",
        "/audit?after=%%%",
    ],
)
def test_bad_parameters_elsewhere(operator: Browser, url: str) -> None:
    response = operator.get(url)
    assert response.status_code == 400
    assert "Bad input" in response.get_data(as_text=True)


def test_error_search_covers_past_attempts_and_escapes_wildcards(
    viewer: Browser, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        current = dead_job(conn, last_error="HTTP 503 from CRM: 50%_off banner")
        past = make_job(conn, job_type="email.send", status="succeeded", last_error=None)
        conn.execute(
            sa.insert(job_attempts).values(
                job_id=past, attempt=1, outcome="failed", error="Connection RESET by peer"
            )
        )
        decoy = dead_job(conn, last_error="HTTP 503 from CRM: 50 percent off banner")
    found = viewer.get("/jobs?error=50%25_off").get_data(as_text=True)
    assert f'href="/jobs/{current}"' in found
    assert f'href="/jobs/{decoy}"' not in found
    reset = viewer.get("/jobs?error=connection+reset").get_data(as_text=True)
    assert f'href="/jobs/{past}"' in reset


def test_job_detail_tells_the_whole_story(viewer: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        parent = dead_job(
            conn,
            group_key="user:7",
            resolution="requeued",
            resolved_by="otto",
            resolved_at=NOW,
            resolution_reason="CRM back",
        )
        child = make_job(
            conn,
            job_type="webhook.deliver",
            queue="webhooks",
            status="failed",
            group_key="user:7",
            retried_from_id=parent,
            attempts=1,
            payload={"endpoint": "crm", "event": "x", "data": {}},
            last_error="timeout",
        )
        waiting = make_job(conn, job_type="webhook.deliver", queue="webhooks", group_key="user:7")
        conn.execute(
            sa.insert(job_attempts).values(
                job_id=child,
                attempt=1,
                outcome="timeout",
                worker_id="host:1:ab",
                started_at=NOW - timedelta(seconds=12),
                finished_at=NOW - timedelta(seconds=2),
                error="read timeout\x01\x1b after 10s",
            )
        )
        conn.execute(
            sa.insert(webhook_deliveries).values(
                job_id=child,
                attempt=1,
                endpoint="crm",
                webhook_id="msg_1",
                url="https://crm/x",
                status_code=503,
                latency_ms=120.0,
                outcome="failed",
                response_excerpt="busy",
            )
        )
    parent_page = viewer.get(f"/jobs/{parent}").get_data(as_text=True)
    assert "Requeued</strong> by otto" in parent_page
    assert f'Retried as <a href="/jobs/{child}">job #{child}</a>' in parent_page
    child_page = viewer.get(f"/jobs/{child}").get_data(as_text=True)
    assert f'Retry of <a href="/jobs/{parent}">job #{parent}</a>' in child_page
    assert "read timeout\\x01\\x1b after 10s" in child_page
    assert "10 s" in child_page
    assert "busy" in child_page
    assert ">503<" in child_page
    assert f'id="job-{child}-status"' in child_page
    waiting_page = viewer.get(f"/jobs/{waiting}").get_data(as_text=True)
    assert f'the group is blocked by <a href="/jobs/{child}">job #{child}</a>' in waiting_page
    assert viewer.get("/jobs/999999").status_code == 404
    assert viewer.get("/jobs/abc").status_code == 404


def test_a_long_key_wraps_only_between_its_parts(viewer: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        job_id = make_job(
            conn,
            job_type="email.send",
            idempotency_key="welcome_email:user:42:event:user.created",
            group_key="crm:user:42<b>&amp;:tenant_eu/west:region",
        )
    html = viewer.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "welcome_<wbr>email:<wbr>user:<wbr>42:<wbr>event:<wbr>user.<wbr>created</a>" in html
    assert (
        "crm:<wbr>user:<wbr>42&lt;b&gt;&amp;amp;:<wbr>tenant_<wbr>eu/<wbr>west:<wbr>region" in html
    )
    assert "<b>" not in html
    # A name that fits on a line stays exactly as it is.
    assert f'Job #{job_id} · <span class="ident">email.send</span>' in html


def test_status_badge_stops_polling_when_final(viewer: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        queued = make_job(conn, job_type="email.send")
        done = make_job(conn, job_type="email.send", status="succeeded")
    assert viewer.get(f"/jobs/{queued}/status").status_code == 200
    assert viewer.get(f"/jobs/{done}/status").status_code == 286


def test_dead_letters_grouped_by_fingerprint(viewer: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        for n in range(4):
            dead_job(
                conn,
                last_error=f"TimeoutError: crm timed out after {n}.5s (job {n})",
                finished_at=NOW - timedelta(hours=n),
            )
        dead_job(
            conn, job_type="email.send", queue="email", last_error="SMTP 550 mailbox unavailable"
        )
        dead_job(
            conn, last_error="resolved one", resolution="ignored", resolved_by="x", resolved_at=NOW
        )
    html = viewer.get("/dead").get_data(as_text=True)
    assert "5 dead jobs need a decision, in 2 error groups" in html
    assert html.index("crm timed out") < html.index("SMTP 550")
    assert "resolved one" not in html
    only_email = viewer.get("/dead?type=email.send").get_data(as_text=True)
    assert "crm timed out" not in only_email
    fragment = viewer.get(
        "/dead?error=smtp", headers={"HX-Request": "true", "HX-Target": "dead-groups"}
    )
    assert "<html" not in fragment.get_data(as_text=True)


def test_workers_alerts_endpoints_pages(viewer: Browser, engine: sa.Engine) -> None:
    from jobdesk.shared.alerts.models import alerts
    from jobdesk.shared.core.models import leases, workers
    from jobdesk.shared.webhooks.models import webhook_endpoints

    with engine.begin() as conn:
        conn.execute(
            sa.insert(workers).values(
                id="web-1:10:aa",
                host="web-1",
                pid=10,
                queues=["email"],
                job_types=["email.send"],
                concurrency=4,
                version="0.1.0",
                last_seen_at=NOW,
                clock_skew_seconds=42.0,
            )
        )
        conn.execute(
            sa.insert(leases).values(
                name="leader", holder="web-1:10:aa", expires_at=NOW + timedelta(hours=1)
            )
        )
        conn.execute(
            sa.insert(alerts).values(
                rule="dead_letter_spike", subject="type:x", message="12 jobs went dead in 10 min"
            )
        )
        conn.execute(
            sa.insert(webhook_endpoints).values(
                name="crm",
                url="https://crm.example/h",
                secret="whsec_x",
                paused=True,
                paused_reason="maintenance",
            )
        )
    workers_page = viewer.get("/workers").get_data(as_text=True)
    assert "web-1:10:aa" in workers_page
    assert "leader" in workers_page
    assert "+42.0 s" in workers_page
    alerts_page = viewer.get("/alerts").get_data(as_text=True)
    assert "12 jobs went dead in 10 min" in alerts_page
    assert ">Acknowledge</button>" not in alerts_page
    assert "No resolved alerts" in viewer.get("/alerts?status=resolved").get_data(as_text=True)
    endpoints_page = viewer.get("/endpoints").get_data(as_text=True)
    assert "crm" in endpoints_page
    assert "paused" in endpoints_page
    assert "maintenance" in endpoints_page
    assert "whsec_x" not in endpoints_page
    assert ">Resume</button>" not in endpoints_page


def test_health_endpoints(app: object) -> None:
    from flask import Flask

    assert isinstance(app, Flask)
    client = app.test_client()
    assert client.get("/healthz").get_json() == {"status": "ok"}
    assert client.get("/readyz").get_json() == {"status": "ok"}


def test_alerts_lead_to_their_jobs_endpoint_and_error(viewer: Browser, engine: sa.Engine) -> None:
    from jobdesk.shared.alerts.models import alerts

    with engine.begin() as conn:
        conn.execute(
            sa.insert(alerts).values(
                rule="dead_letter_spike",
                subject="webhook.deliver:crm",
                message="6 webhook.deliver jobs to crm died in the last 15 min: ConnectTimeout",
                details={
                    "filter": {"status": "dead", "job_type": "webhook.deliver", "endpoint": "crm"},
                    "endpoints": ["crm"],
                    "error": "ConnectTimeout",
                    "related_alert_id": 41,
                },
            )
        )
    html = viewer.get("/alerts").get_data(as_text=True)
    assert "died in the last 15 min: ConnectTimeout" in html
    assert 'href="/jobs?type=webhook.deliver&amp;status=dead">its jobs</a>' in html
    assert 'href="/endpoints#endpoint-crm">endpoint crm</a>' in html
    assert "same incident as alert #41" in html


def test_a_pruned_dead_letter_keeps_its_story(operator: Browser, engine: sa.Engine) -> None:
    """Retention prunes a resolved dead letter: its page, its audit rows and its retry's
    link still lead somewhere (a tombstone)."""
    from jobdesk.shared.core.states import JobStatus
    from jobdesk.shared.retention.pruning import prune_jobs_batch

    with engine.begin() as conn:
        dead_id = dead_job(conn)
    assert operator.post(f"/jobs/{dead_id}/ignore", {"reason": "customer left"}).status_code == 303
    with engine.begin() as conn:
        retry = make_job(conn, retried_from_id=dead_id)
        later = datetime.now(UTC) + timedelta(days=1)
        assert prune_jobs_batch(conn, JobStatus.DEAD, later, now=later).deleted == 1
    page = operator.get(f"/jobs/{dead_id}")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert "This job was pruned." in html
    assert "It was ignored by otto" in html
    assert "customer left" in html
    assert f'href="/jobs/{retry}"' in html
    assert "ignore" in html  # the audit entry
    child = operator.get(f"/jobs/{retry}").get_data(as_text=True)
    assert f'href="/jobs/{dead_id}"' in child
    assert operator.get("/jobs/999999").status_code == 404
