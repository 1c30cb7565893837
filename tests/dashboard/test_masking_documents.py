"""Job documents on the job page, the fix form, the jobs list and the raw downloads:
masked by key for every role, and in time linear in their size (issue 23 #2, #5, #6, #7)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask

from jobdesk.shared.core.models import job_attempts
from tests.cpu_time import untraced_cpu_seconds
from tests.dashboard.conftest import Browser, browser_for, dead_job
from tests.dashboard.test_poison_documents import plain_sql_job

#: Issue 23 #2: a 48 KB payload string like this cost 10-13 s per job page view.
HOSTILE = " " + "secret" * 8000
PEM_BODY = "MIIEpAIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB"
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----"
SECRET_PAYLOAD: dict[str, Any] = {
    "endpoint": "crm",
    "headers": {"Cookie": "sessionid=abc123def; csrftoken=zz99", "Accept": "*/*"},
    "passphrase": "correct horse battery",
    "signing": {"private_key": PEM, "pem": PEM, "note": "kept"},
    "login": "password=correct horse battery",
    "pin": 4321,
    "card": 4111111111111111,
    "key": "k-778899",
    "to": "ana.lopez@example.com",
}
LEAKS = ("abc123def", "zz99", "horse", "battery", PEM_BODY[:16], "4321", "4111111111111111")
LEAKS += ("k-778899",)
#: CPU time one request may take here (a quadratic masking took tens of seconds).
BOUND_SECONDS = 2.0


def _timed_get(browser: Browser, url: str) -> tuple[Any, float]:
    with untraced_cpu_seconds() as spent:
        response = browser.get(url)
    return response, spent[0]


@pytest.mark.parametrize("role", ["vera", "otto", "ada"])
def test_a_hostile_payload_string_does_not_freeze_the_job_page(
    app: Flask, engine: sa.Engine, users: None, role: str
) -> None:
    with engine.begin() as conn:
        job_id = dead_job(conn, payload={"endpoint": "crm", "note": HOSTILE, "x": HOSTILE})
    browser = browser_for(app, role)
    urls = [f"/jobs/{job_id}", "/jobs", "/jobs?payload=endpoint=crm"]
    if role != "vera":
        urls += [f"/jobs/{job_id}/fix", f"/jobs/{job_id}/payload.json"]
    for url in urls:
        response, spent = _timed_get(browser, url)
        assert response.status_code == 200, url
        assert spent < BOUND_SECONDS, f"{url} took {spent:.1f} s of CPU"


@pytest.mark.parametrize("role", ["otto", "ada"])
@pytest.mark.parametrize("name", ["payload", "result"])
def test_raw_documents_are_masked_by_key_like_the_page(
    app: Flask, engine: sa.Engine, users: None, role: str, name: str
) -> None:
    with engine.begin() as conn:
        job_id = dead_job(conn, **{name: SECRET_PAYLOAD})
    browser = browser_for(app, role)
    response = browser.get(f"/jobs/{job_id}/{name}.json")
    assert response.status_code == 200
    body = response.get_data(as_text=True)
    for leak in LEAKS:
        assert leak not in body, (leak, body)
    document = json.loads(body)
    assert document["headers"] == {"Cookie": "***", "Accept": "*/*"}
    assert document["passphrase"] == "***"
    assert document["signing"]["private_key"] == "***"
    assert document["signing"]["note"] == "kept"
    assert document["signing"]["pem"].startswith("-----BEGIN RSA PRIVATE KEY-----")
    assert document["login"] == "password=***"
    assert (document["pin"], document["card"], document["key"]) == ("***", "***", "***")
    assert document["to"] == "ana.lopez@example.com"  # operators see emails
    page = browser.get(f"/jobs/{job_id}").get_data(as_text=True)
    for leak in LEAKS:
        assert leak not in page, leak


def test_a_raw_document_too_deep_to_decode_is_still_masked_by_key(
    operator: Browser, engine: sa.Engine
) -> None:
    inner = json.dumps(SECRET_PAYLOAD)
    job_id = plain_sql_job(engine, "[" * 150 + inner + "]" * 150)
    page = operator.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "nested" in page
    body = operator.get(f"/jobs/{job_id}/payload.json").get_data(as_text=True)
    for leak in LEAKS:
        assert leak not in body, (leak, body)
    assert '"Cookie": "***"' in body
    assert '"note": "kept"' in body
    assert body.count("[") >= 150


@pytest.mark.sqlite_only
def test_a_raw_document_that_is_not_json_is_still_masked_by_key(
    operator: Browser, engine: sa.Engine
) -> None:
    job_id = plain_sql_job(engine, json.dumps(SECRET_PAYLOAD)[:-40])
    body = operator.get(f"/jobs/{job_id}/payload.json").get_data(as_text=True)
    for leak in LEAKS:
        assert leak not in body, (leak, body)
    assert '"passphrase": "***"' in body


def _summary_cells(html: str) -> list[str]:
    return [
        re.sub(r"<[^>]+>", "", cell)
        for cell in re.findall(r'<td class="payload-cell">(.*?)</td>', html, re.DOTALL)
    ]


def test_the_jobs_list_checks_the_whole_key_and_masks_card_numbers(
    viewer: Browser, engine: sa.Engine
) -> None:
    long_key = "customer_billing_integration_settings_database_password"
    with engine.begin() as conn:
        dead_job(conn, payload={long_key: "hunter2-long", "card": 4111111111111111, "n": 7})
    cells = _summary_cells(viewer.get("/jobs").get_data(as_text=True))
    [cell] = [c for c in cells if "customer_billing" in c]
    assert "hunter2-long" not in cell
    assert "4111111111111111" not in cell
    assert "card=***" in cell
    assert "n=7" in cell
    assert "_password" not in cell  # the key is cut for display, after the check
    assert f"{long_key[:39]}…=***" in cell


def test_a_stored_error_of_blank_lines_does_not_freeze_the_job_page(
    app: Flask, engine: sa.Engine, users: None
) -> None:
    """Plain SQL may store any error. Finding its stack for a viewer scanned a run of
    blank lines once per line, and folding it read a frame's line again for each line
    under it: both quadratic (~20 s for 64 KiB of blank lines)."""
    error = "ValueError: x\n" + "\n" * 65536 + "the receiver said no\n"
    error += '  File "' + "a" * 65536 + '", line 2, in g\n' + "    step()\n" * 16000
    with engine.begin() as conn:
        job_id = dead_job(conn, last_error=error)
        conn.execute(
            sa.insert(job_attempts).values(job_id=job_id, attempt=1, outcome="failed", error=error)
        )
    for role in ("vera", "otto"):
        response, spent = _timed_get(browser_for(app, role), f"/jobs/{job_id}")
        assert response.status_code == 200
        assert spent < BOUND_SECONDS, f"{role}: the job page took {spent:.1f} s of CPU"
