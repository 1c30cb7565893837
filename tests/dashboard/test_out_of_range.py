"""B14: out-of-range numbers and dates are a 400 naming the parameter, never a 500
(issue 12 #10) — on every path: URL ids, filters, page cursors, the fix form."""

from __future__ import annotations

import base64
import json

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.errors import ValidationError
from tests.dashboard.conftest import Browser, dead_job

BIG = "99999999999999999999"  # 20 digits: past BIGINT
TWO_63 = 2**63


def _cursor(*parts: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(parts)).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    ("url", "field"),
    [
        (f"/jobs/{BIG}", "job_id"),
        (f"/jobs/{TWO_63}", "job_id"),
        ("/jobs/" + "9" * 5000, "job_id"),
        ("/jobs/0", "job_id"),
        (f"/jobs/{BIG}/status", "job_id"),
    ],
)
def test_ids_in_the_path_out_of_range(viewer: Browser, url: str, field: str) -> None:
    response = viewer.get(url)
    assert response.status_code == 400, response.get_data(as_text=True)[:300]
    assert f"Bad input: {field}" in response.get_data(as_text=True)


@pytest.mark.parametrize(
    ("url", "field"),
    [
        (f"/jobs/{BIG}/retry", "job_id"),
        (f"/jobs/{TWO_63}/fix", "job_id"),
        (f"/alerts/{BIG}/acknowledge", "alert_id"),
        ("/endpoints/a%00b/pause", "name"),
    ],
)
def test_posts_with_ids_out_of_range(admin: Browser, url: str, field: str) -> None:
    response = admin.post(url, {"reason": "x", "payload": "{}", "note": "x"})
    assert response.status_code == 400, response.get_data(as_text=True)[:300]
    assert f"Bad input: {field}" in response.get_data(as_text=True)


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("since=0001-01-01T00:00:00%2B05:00", "since"),
        ("until=9999-12-31T23:59:59-05:00", "until"),
        ("since=0001-01-01T00:00:00%2B00:01", "since"),
        (f"after={_cursor('newest', TWO_63, TWO_63)}", "after"),
        (f"after={_cursor('newest', 5, TWO_63)}", "after"),
        (f"after={_cursor('oldest', 0, 1)}", "after"),
        (f"sort=updated&after={_cursor('updated', '0001-01-01T00:00:00+05:00', 1)}", "after"),
        (f"sort=next_run&after={_cursor('next_run', '9999-12-31T23:59:59-05:00', 1)}", "after"),
        ("retried_from=" + "9" * 5000, "retried_from"),
        ("retried_from=²", "retried_from"),
    ],
)
def test_list_filters_and_cursors_out_of_range(viewer: Browser, query: str, field: str) -> None:
    response = viewer.get(f"/jobs?{query}")
    assert response.status_code == 400, response.get_data(as_text=True)[:300]
    assert f"Bad filter: {field}" in response.get_data(as_text=True)


@pytest.mark.parametrize(
    "url",
    [
        "/audit?since=0001-01-01T00:00:00%2B05:00",
        "/audit?until=9999-12-31T23:59:59-01:00",
        "/audit?after=" + base64.urlsafe_b64encode(b"a9999999999999999999").decode(),
        "/audit?job=" + "9" * 5000,
        "/dead?since=0001-01-01T00:00:00%2B05:00",
        "/dead/bulk?action=retry&ids=" + BIG,
        "/dead/bulk?action=retry&ids=²",
    ],
)
def test_other_pages_out_of_range(operator: Browser, url: str) -> None:
    response = operator.get(url)
    assert response.status_code == 400, response.get_data(as_text=True)[:300]
    assert "Bad input" in response.get_data(as_text=True)


def test_year_1_and_9999_in_utc_are_fine_and_round_trip(viewer: Browser) -> None:
    page = viewer.get("/jobs?since=0001-01-01T00:00:00&until=9999-12-31T23:59:59")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert 'value="0001-01-01T00:00:00"' in html  # zero-padded: the next page parses it


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ('{"endpoint": "crm", "event": "e", "data": {"n": ' + "9" * 5000 + "}}", "5,000-digit"),
        ('{"endpoint": "crm", "event": "e", "data": {"n": ' + str(TWO_63) + "}}", "payload.data.n"),
        ('{"endpoint": "crm", "event": "e", "data": {"n": -' + "9" * 30 + "}}", "30-digit"),
        ('{"endpoint": "crm", "event": "e", "data": {"x": 1e400}}', "too large"),
        ('{"endpoint": "crm", "event": "e", "data": {"x": -Infinity}}', "-Infinity"),
    ],
)
def test_numbers_the_fix_form_cannot_store(
    operator: Browser, engine: sa.Engine, payload: str, message: str
) -> None:
    with engine.begin() as conn:
        job_id = dead_job(conn)
    response = operator.post(f"/jobs/{job_id}/fix", {"payload": payload})
    assert response.status_code == 422, response.get_data(as_text=True)[:300]
    assert message in response.get_data(as_text=True)


def test_the_fix_api_checks_numbers_too() -> None:
    from jobdesk.shared.operator.commands.triage import validate_fixed_payload

    with pytest.raises(ValidationError) as caught:
        validate_fixed_payload("test.noop", {"a": [1, {"b": 10**30}]})
    assert caught.value.field == "payload.a[1].b"
    assert validate_fixed_payload("test.noop", {"n": -(2**63), "m": 2**63 - 1, "f": 1.5})
