"""A job's attempts on its page: one line each with the absolute time, the gap since the
previous attempt, duration, outcome, worker and the error's first line; repeats named
as such; tracebacks behind a disclosure with Jobdesk's own frames folded."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.masking import fingerprint
from jobdesk.shared.core.models import job_attempts
from jobdesk.shared.webhooks.models import webhook_deliveries
from tests.dashboard.conftest import Browser, dead_job
from tests.factories import make_job

# Roles, headers, forms and rendering: the same on either database.
pytestmark = pytest.mark.one_database

SITE = "/srv/app/.venv/lib/python3.12/site-packages"
ERROR = "ConnectTimeout: POST https://crm.example/hooks timed out after 10.0s"
STACK = "".join(
    f'  File "{SITE}/jobdesk/worker/{name}.py", line {10 + n}, in step\n    step_{n}()\n'
    for n, name in enumerate(("runner", "pool", "executor", "executor", "context", "resilience"))
) + (
    '  File "/srv/app/integrations/crm.py", line 41, in deliver\n'
    "    client.post(url, json=body)\n"
    f'  File "{SITE}/jobdesk/worker/jobs/webhook_http.py", line 9, in post\n'
    "    raise ConnectTimeout(url)\n"
)
BACKOFF = (2, 4, 8, 16)


def _five_attempts(engine: sa.Engine) -> int:
    """Attempts 1-5, each 1 s long, retried after 2, 4, 8 and 16 s."""
    with engine.begin() as conn:
        job_id = dead_job(conn, last_error=ERROR + "\n" + STACK)
        # The page words times against the real clock, so the test does too.
        start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)
        for number, wait in enumerate((0, *BACKOFF), start=1):
            start += timedelta(seconds=wait)
            error = f"{ERROR} (attempt {number})\n{STACK}"
            conn.execute(
                sa.insert(job_attempts).values(
                    job_id=job_id, attempt=number, worker_id=f"app-{number % 2}:42:ab",
                    outcome="timeout", started_at=start,
                    finished_at=start + timedelta(seconds=1),
                    error=error, error_fingerprint=fingerprint(error),
                )
            )  # fmt: skip
            start += timedelta(seconds=1)
    return job_id


def _attempts_section(page: str) -> str:
    return page.split('<section class="panel" id="attempts">')[1].split("</section>", maxsplit=1)[0]


def test_five_attempts_read_as_five_lines_with_their_backoff(
    operator: Browser, engine: sa.Engine
) -> None:
    job_id = _five_attempts(engine)
    section = _attempts_section(operator.get(f"/jobs/{job_id}").get_data(as_text=True))
    rows = re.findall(r'<tr id="attempt-\d+">(.*?)</tr>', section, re.S)
    assert len(rows) == 5
    gaps = [re.search(r">\+(\d+) s<", row) for row in rows]
    assert gaps[0] is None
    assert [int(g.group(1)) for g in gaps[1:] if g] == list(BACKOFF)
    with engine.connect() as conn:
        started = conn.execute(
            sa.select(sa.func.min(job_attempts.c.started_at)).where(job_attempts.c.job_id == job_id)
        ).scalar_one()
    first = started.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert f'<time datetime="{first}"' in rows[0]
    assert "2 h 0 min ago" in rows[0]
    assert all('<td class="num small nowrap">1 s</td>' in row for row in rows)
    assert "app-1:42:ab" in rows[0]
    assert "outcome-timeout" in rows[4]
    # The first shows its first line, the rest say they repeat it.
    assert f"{ERROR} (attempt 1)" in rows[0].split("</summary>")[0]
    for row in rows[1:]:
        assert "same error as attempt 1" in row.split("</summary>")[0]
    # The stack: Jobdesk's frames folded, the application's frame shown.
    assert section.count('<details class="trace">') == 5
    assert section.count("… 6 Jobdesk frames") == 5
    assert section.count("… 1 Jobdesk frame<") == 5
    shown = re.findall(r"\s<pre>(.*?)</pre>", rows[0], re.S)
    assert shown == [
        "  File &#34;/srv/app/integrations/crm.py&#34;, line 41, in deliver\n"
        "    client.post(url, json=body)"
    ]


def test_viewers_read_the_first_lines_without_any_stack(viewer: Browser, engine: sa.Engine) -> None:
    job_id = _five_attempts(engine)
    section = _attempts_section(viewer.get(f"/jobs/{job_id}").get_data(as_text=True))
    assert f"{ERROR} (attempt 1)" in section
    assert "same error as attempt 1" in section
    assert "Jobdesk frame" not in section
    assert "/srv/" not in section
    assert "site-packages" not in section


def test_a_successful_webhook_response_is_not_drawn_as_an_error(
    viewer: Browser, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        job_id = make_job(conn, job_type="webhook.deliver", status="succeeded", attempts=2)
        for attempt, code, body in ((1, 503, "busy, try later"), (2, 200, '{"ok": true}')):
            conn.execute(
                sa.insert(webhook_deliveries).values(
                    job_id=job_id, attempt=attempt, endpoint="crm", webhook_id="msg_1",
                    url="https://crm/x", status_code=code, latency_ms=80.0,
                    outcome="delivered" if code == 200 else "failed", response_excerpt=body,
                )
            )  # fmt: skip
    page = viewer.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert '<pre class="response">{&#34;ok&#34;: true}</pre>' in page
    assert '<pre class="inline-error">busy, try later</pre>' in page
