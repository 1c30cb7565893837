"""End-to-end fixtures: a real dashboard server on 127.0.0.1 (a free port, in a thread),
seeded with the signup story's data, and Debian's Chromium driven by Playwright.

Screenshots are taken only when `JOBDESK_E2E_SCREENSHOT_DIR` is set (the README's images
are made with `JOBDESK_E2E_SCREENSHOT_DIR=docs/screenshots pytest -m e2e -k sqlite`): a
full-page picture of every screen costs seconds per test and checks nothing. Any
Content-Security-Policy violation fails the test.

The browser stories run on SQLite only (`one_database`): what a page shows is decided by
queries the dashboard tests in `tests/dashboard/` run on both databases. The operator
stories (`test_operator_stories.py`) also run on PostgreSQL: one browser pass over every
action on the other dialect.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from werkzeug.serving import make_server

from jobdesk import enqueue
from jobdesk.dashboard import create_app
from jobdesk.shared.alerts.models import alerts
from jobdesk.shared.core.masking import fingerprint
from jobdesk.shared.core.models import job_attempts, leases, workers
from jobdesk.shared.history.rollup import roll_up
from jobdesk.shared.operator.commands.accounts import add_operator
from jobdesk.shared.schedules.store import sync_declared
from jobdesk.shared.settings import Settings
from jobdesk.shared.webhooks.models import webhook_endpoints
from jobdesk.worker.schedules import ScheduleSpec
from tests.factories import make_job

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]  # fmt: skip
PASSWORD = "support desk password"
SECRET = "e2e-secret-key-abcdefghijklmnopqrstuvwxyz-0123"
#: What the worker records when the CRM never answers (`WebhookDeliveryError: endpoint
#: <name>: <kind>: ...`, searchable as "endpoint crm" the way docs/demo.md triages it).
CRM_ERROR = (
    "WebhookDeliveryError: endpoint crm: connect_error: "
    "ConnectTimeout: POST https://crm.example.com/hooks/users timed out after 10.0s"
)
#: The demo's CRM webhook gives up after its 5th attempt (jobdesk/demo/story.py).
CRM_ATTEMPTS = 5


@dataclass
class Seeded:
    crm_dead: list[int]
    email_dead: int
    report_dead: int


#: The CRM webhook's production backoff between its attempts (the story's 1 min, 5 min,
#: 30 min, 2 h) and how long each attempt waited before it timed out.
CRM_BACKOFF = (timedelta(minutes=1), timedelta(minutes=5), timedelta(minutes=30),
               timedelta(hours=2))  # fmt: skip
ATTEMPT_TIME = timedelta(seconds=10)


def first_try(finished: datetime) -> datetime:
    """When a CRM webhook that went dead at `finished` was first tried."""
    return finished - sum(CRM_BACKOFF, timedelta()) - CRM_ATTEMPTS * ATTEMPT_TIME


def _attempts(conn: sa.Connection, job_id: int, errors: list[str], finished: datetime) -> None:
    started = first_try(finished)
    for number, error in enumerate(errors, start=1):
        conn.execute(sa.insert(job_attempts).values(
            job_id=job_id, attempt=number, worker_id="app-1:4242:9f1c", outcome="timeout",
            started_at=started, finished_at=started + ATTEMPT_TIME, error=error,
            error_fingerprint=fingerprint(error)))  # fmt: skip
        if number <= len(CRM_BACKOFF):
            started += ATTEMPT_TIME + CRM_BACKOFF[number - 1]


def _story_alerts(conn: sa.Connection, dead: int, now: datetime) -> None:
    """The two alerts the CRM outage tripped, worded and linked as the rules
    (shared/alerts/rules.py) word them. The morning after, the repeated error has left
    its window and resolved; the dead-letter spike stays open while its dead letters
    wait for a decision, and names the other alert as the same incident."""
    crm = CRM_ERROR + f" (attempt {CRM_ATTEMPTS}, job 206)"
    opened = now - timedelta(hours=7, minutes=35)  # when the first of them went dead
    fingerprinted = fingerprint(CRM_ERROR)
    repeated = conn.execute(
        sa.insert(alerts)
        .values(
            rule="repeated_error",
            subject=fingerprinted,
            status="resolved",
            message=(
                f"{dead} jobs (webhook.deliver to crm) failed with the same error in the "
                f"last 15 min: {crm}"
            ),
            count=dead,
            opened_at=opened,
            last_seen_at=opened + timedelta(minutes=5),
            resolved_at=opened + timedelta(minutes=20),
            notify_key=f"repeated_error:{fingerprinted}:{opened:%Y%m%d%H%M}",
            details={
                "fingerprint": fingerprinted,
                "job_types": ["webhook.deliver"],
                "jobs_by_type": {"webhook.deliver": dead},
                "endpoints": ["crm"],
                "error": crm,
                "filter": {"fingerprint": fingerprinted},
            },
        )
        .returning(alerts.c.id)
    ).scalar_one()
    since = opened - timedelta(minutes=15)
    conn.execute(
        sa.insert(alerts).values(
            rule="dead_letter_spike",
            subject="webhook.deliver:crm",
            message=(
                f"{dead} webhook.deliver jobs to crm died since {since:%H:%M} UTC and are "
                f"still unresolved: {crm}"
            ),
            count=dead,
            opened_at=opened,
            last_seen_at=now,
            details={
                "job_type": "webhook.deliver",
                "endpoint": "crm",
                "job_types": ["webhook.deliver"],
                "endpoints": ["crm"],
                "since": since.isoformat(),
                "filter": {"status": "dead", "job_type": "webhook.deliver", "endpoint": "crm"},
                "error": crm,
                "related_alert_id": repeated,
            },
        )
    )


def seed(engine: sa.Engine) -> Seeded:
    """The signup story the morning after: the CRM was down, its webhooks went dead."""
    now = datetime.now(UTC)
    with engine.begin() as conn:
        add_operator(conn, "sam", PASSWORD, "operator", now=now)
        add_operator(conn, "vic", PASSWORD, "viewer", now=now)
        add_operator(conn, "ada", PASSWORD, "admin", now=now)
        conn.execute(
            sa.insert(webhook_endpoints).values(
                name="crm", url="https://crm.example.com/hooks/users", secret="whsec_dGVzdA"
            )
        )
        conn.execute(
            sa.insert(webhook_endpoints).values(
                name="billing", url="https://billing.example.com/events", secret="whsec_dGVzdB"
            )
        )
        for user in range(101, 109):
            enqueue(
                conn,
                "email.send",
                {
                    "to": f"user{user}@example.com",
                    "template": "welcome",
                    "event_id": f"signup:{user}",
                },
                idempotency_key=f"welcome_email:user:{user}",
            )
        for user in range(101, 105):
            make_job(
                conn,
                job_type="email.send",
                queue="email",
                status="succeeded",
                attempts=1,
                payload={"to": f"user{user}@example.com", "template": "welcome"},
                finished_at=now - timedelta(hours=5),
            )
        crm_dead = []
        for index, user in enumerate(range(201, 207)):
            died = now - timedelta(hours=2 + index, minutes=7 * index)
            job_id = make_job(
                conn,
                job_type="webhook.deliver",
                queue="webhooks",
                status="dead",
                attempts=CRM_ATTEMPTS,
                max_attempts=CRM_ATTEMPTS,
                group_key=f"crm:user:{user}",
                idempotency_key=f"webhook:user:{user}:event:user.created",
                payload={
                    "endpoint": "crm",
                    "event": "user.created",
                    "data": {"user_id": user, "email": f"user{user}@example.com", "plan": "pro"},
                    "api_token": "crm_live_8f2d1c",
                },
                last_error=CRM_ERROR + f" (attempt {CRM_ATTEMPTS}, job {user})",
                error_fingerprint=fingerprint(CRM_ERROR),
                finished_at=died,
                created_at=first_try(died) - timedelta(seconds=1),
            )
            _attempts(
                conn,
                job_id,
                [CRM_ERROR + f" (attempt {n}, job {user})" for n in range(1, CRM_ATTEMPTS + 1)],
                died,
            )
            crm_dead.append(job_id)
        email_dead = make_job(
            conn,
            job_type="email.send",
            queue="email",
            status="dead",
            attempts=1,
            max_attempts=6,
            payload={"to": "ana.lopez@exmaple.con", "template": "welcome", "event_id": "signup:77"},
            last_error="SMTP 550 5.1.1 <ana.lopez@exmaple.con>: mailbox unavailable (permanent)",
            error_fingerprint=fingerprint("SMTP 550 5.1.1 <x>: mailbox unavailable (permanent)"),
            finished_at=now - timedelta(minutes=50),
        )
        report_dead = make_job(
            conn,
            job_type="report.generate",
            queue="reports",
            status="dead",
            attempts=3,
            max_attempts=3,
            payload={"report": "activity", "params": {"day": "2026-11-28"}},
            last_error="PermanentError: report 'activity' has no data source for 2026-11-28",
            error_fingerprint=fingerprint("PermanentError: report has no data source"),
            finished_at=now - timedelta(minutes=20),
        )
        make_job(
            conn,
            job_type="report.generate",
            queue="reports",
            status="running",
            attempts=1,
            locked_by="app-1:4242:9f1c",
            started_at=now - timedelta(minutes=2),
            payload={"report": "activity", "params": {}},
            progress={"done": 3, "total": 8},
        )
        conn.execute(
            sa.insert(workers).values(
                id="app-1:4242:9f1c",
                host="app-1",
                pid=4242,
                queues=["email", "webhooks", "reports"],
                job_types=["email.send", "webhook.deliver", "report.generate", "report.chunk"],
                concurrency=8,
                version="0.1.0",
                last_seen_at=now,
                clock_skew_seconds=0.3,
            )
        )
        conn.execute(
            sa.insert(leases).values(
                name="leader", holder="app-1:4242:9f1c", expires_at=now + timedelta(seconds=30)
            )
        )
        _story_alerts(conn, len(crm_dead), now)
        nightly = ScheduleSpec(
            "report.nightly",
            "report.generate",
            {"report": "nightly_activity"},
            cron="0 2 * * *",
            tz="Europe/Berlin",
        )
        sync_declared(conn, [nightly.declared(now)], now=now)
    # The leader has folded the finished attempts into the History page's buckets.
    roll_up(engine, now)
    return Seeded(crm_dead, email_dead, report_dead)


def screenshots_wanted() -> bool:
    return bool(os.environ.get("JOBDESK_E2E_SCREENSHOT_DIR"))


@pytest.fixture
def screenshot_dir(tmp_path: Path) -> Path:
    configured = os.environ.get("JOBDESK_E2E_SCREENSHOT_DIR")
    target = Path(configured) if configured else tmp_path / "screenshots"
    target.mkdir(parents=True, exist_ok=True)
    return target


@pytest.fixture
def live_server(db_url: str, engine: sa.Engine) -> Iterator[tuple[str, Seeded]]:
    seeded = seed(engine)
    # Job secrets open with the keys the test's environment sets (none: unset).
    keys = os.environ.get("JOBDESK_ENCRYPTION_KEYS")
    app = create_app(
        replace(Settings(), database_url=db_url, secret_key=SECRET, encryption_keys=keys)
    )
    serving = InFlight(app)
    server = make_server("127.0.0.1", 0, serving, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", seeded
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()
        # A page's poll may still be running in its request thread: disposing the
        # engine under it would strand its database connection in the old pool, to be
        # garbage-collected open during some later test (a ResourceWarning there).
        serving.wait_idle(timeout=10)
        app.extensions["jobdesk"].dispose()


class InFlight:
    """WSGI middleware counting requests being served, so teardown can wait for them."""

    def __init__(self, app: Any) -> None:
        self._app = app
        self._count = 0
        self._idle = threading.Condition()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        with self._idle:
            self._count += 1
        try:
            # Read whole (the dashboard streams nothing), so the request is over here.
            body = self._app(environ, start_response)
            try:
                return list(body)
            finally:
                if hasattr(body, "close"):
                    body.close()
        finally:
            with self._idle:
                self._count -= 1
                self._idle.notify_all()

    def wait_idle(self, timeout: float) -> None:
        with self._idle:
            self._idle.wait_for(lambda: self._count == 0, timeout=timeout)


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    # Package scope: Playwright's sync API runs an event loop on this thread while it
    # is open, which later synchronous tests (Django, FastAPI guides) must not see.
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1360, "height": 900}, locale="en-GB")
    page = context.new_page()
    page.set_default_timeout(10_000)
    violations: list[str] = []
    page.on(
        "console",
        lambda msg: (
            violations.append(msg.text)
            if "Content Security Policy" in msg.text or "Refused to" in msg.text
            else None
        ),
    )
    page.on("pageerror", lambda error: violations.append(f"page error: {error}"))
    page.on("dialog", lambda dialog: dialog.accept())
    yield page
    context.close()
    assert not violations, violations
