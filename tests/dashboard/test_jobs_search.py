"""Finding a customer's job on the jobs list: payload and idempotency-key search, queue
and type menus, the payload summary column (masked for the reader), clean filter URLs,
previous pages and the total."""

from __future__ import annotations

import re
import time
from functools import cached_property
from urllib.parse import parse_qs, parse_qsl, quote, urlsplit

import pytest
import sqlalchemy as sa
from flask import Flask, Request
from werkzeug.datastructures import ImmutableMultiDict

from jobdesk.shared.core.job_types import TypeDefaults
from jobdesk.shared.core.models import job_attempts
from jobdesk.shared.core.published_types import publish_defaults
from jobdesk.shared.core.queues import pause_queue
from jobdesk.shared.operator.queries import totals
from jobdesk.shared.operator.queries.visible_text import searchable_error, searchable_error_sql
from tests.dashboard.conftest import NOW, Browser
from tests.factories import make_job

_ROW = re.compile(r'<tr id="job-(\d+)"')


def rows(html: str) -> list[int]:
    return [int(found) for found in _ROW.findall(html)]


def test_payload_search_finds_the_customers_jobs(viewer: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        mine = make_job(conn, payload={"user_id": 42, "endpoint": "crm"})
        text_id = make_job(conn, payload={"user_id": "42"})
        make_job(conn, payload={"user_id": 43, "endpoint": "crm"})
        nested = make_job(conn, payload={"customer": {"id": 7}})
    page = viewer.get("/jobs?payload=user_id%3D42")
    assert page.status_code == 200
    assert rows(page.get_data(as_text=True)) == [text_id, mine]
    html = viewer.get("/jobs?payload=user_id%3D42+endpoint%3Dcrm").get_data(as_text=True)
    assert rows(html) == [mine]
    # The field shows the search back as typed.
    assert 'value="user_id=42 endpoint=crm"' in html
    assert rows(viewer.get('/jobs?payload=user_id%3D"42"').get_data(as_text=True)) == [text_id]
    assert rows(viewer.get("/jobs?payload=customer.id%3D7").get_data(as_text=True)) == [nested]


def test_bad_payload_searches_are_refused_by_name(viewer: Browser) -> None:
    page = viewer.get("/jobs?payload=user_id")
    assert page.status_code == 400
    assert "Bad filter: payload" in page.get_data(as_text=True)


def test_a_huge_payload_search_is_a_quick_400_naming_the_limit(viewer: Browser) -> None:
    """A 256 KiB term cost minutes of CPU per page view (quadratic parsing)."""
    for path in ("/jobs", "/jobs/news", "/dead"):
        started = time.perf_counter()
        page = viewer.get(f"{path}?payload={'a' * 256 * 1024}")
        assert time.perf_counter() - started < 2
        assert page.status_code == 400
        text = page.get_data(as_text=True)
        assert "payload" in text
        assert "limited to 2,000 characters" in text


def test_masked_values_cannot_be_probed(
    viewer: Browser, operator: Browser, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        job_id = make_job(conn, payload={"email": "ana.lopez@example.com", "password": "hunter2"})
    for who in (viewer, operator):
        page = who.get("/jobs?payload=password%3Dhunter2")
        assert page.status_code == 400
        assert "masked" in page.get_data(as_text=True)
    # Emails: masked for viewers (so not searchable by them), shown to operators.
    search = "/jobs?payload=email%3Dana.lopez%40example.com"
    page = viewer.get(search)
    assert page.status_code == 400
    assert "email address" in page.get_data(as_text=True)
    assert rows(operator.get(search).get_data(as_text=True)) == [job_id]
    # The polling endpoint parses the same filters for the same role.
    assert viewer.get(search.replace("/jobs?", "/jobs/news?")).status_code == 400


def test_idempotency_key_search_is_exact(viewer: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        exact = make_job(conn, idempotency_key="order-1001")
        make_job(conn, idempotency_key="order-10010")
    html = viewer.get("/jobs?key=order-1001").get_data(as_text=True)
    assert rows(html) == [exact]
    assert 'name="key" value="order-1001"' in html


def test_queue_and_type_menus_offer_what_exists(viewer: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        make_job(conn, queue="email", job_type="email.send")
        make_job(conn, queue="reports", job_type="report.build")
        pause_queue(conn, "imports", actor="sam", reason="import freeze", now=NOW)
        publish_defaults(conn, {"sms.send": TypeDefaults(queue="sms")}, worker_id="w1", now=NOW)
    html = viewer.get("/jobs?queue=gone").get_data(as_text=True)
    queue_menu = html.split('id="f-queue"', 1)[1].split("</select>", 1)[0]
    type_menu = html.split('id="f-type"', 1)[1].split("</select>", 1)[0]
    assert re.findall(r'<option value="([^"]*)"', queue_menu) == [
        "",
        "email",
        "gone",
        "imports",
        "reports",
    ]
    # The queue the URL names is kept (and chosen) though no job is in it any more.
    assert '<option value="gone" selected>' in queue_menu
    assert re.findall(r'<option value="([^"]*)"', type_menu) == [
        "",
        "email.send",
        "report.build",
        "sms.send",
    ]


def test_the_summary_column_shows_a_few_masked_pairs(
    viewer: Browser, operator: Browser, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        make_job(
            conn,
            payload={"to": "ana.lopez@example.com", "token": "abc", "n": 1, "deep": {"x": 1}},
        )
        make_job(conn, payload={"note": "x" * 300, "ok": True})
        make_job(conn, payload={"a": 1, "b": 2, "c": 3, "d": 4, "e": 5})

    def cells(html: str) -> list[str]:
        return [
            re.sub(r"<[^>]+>", "", cell)
            for cell in re.findall(r'<td class="payload-cell">(.*?)</td>', html)
        ]

    def pairs(html: str) -> list[int]:
        return [
            cell.count('class="pair"')
            for cell in re.findall(r'<td class="payload-cell">(.*?)</td>', html)
        ]

    html = viewer.get("/jobs").get_data(as_text=True)
    seen = cells(html)
    # Newest first: at most three pairs a row; objects are left out.
    assert pairs(html) == [3, 2, 3]
    # Too long to show whole: no text at all (a cut secret might not look like one).
    assert "note=…" in seen[1]
    assert "ok=true" in seen[1]
    for pair in ("to=a***@example.com", "token=***", "n=1"):
        assert pair in seen[2]
    assert "deep" not in seen[2]
    assert "to=ana.lopez@example.com" in cells(operator.get("/jobs").get_data(as_text=True))[2]


def test_blank_fields_are_dropped_from_the_url(viewer: Browser, engine: sa.Engine) -> None:
    form = (
        "/jobs?status=&queue=email&type=&error=&key=&payload=&sort=newest&page_size=50&time=created"
    )
    page = viewer.get(form)
    assert page.status_code == 302
    assert page.headers["Location"] == "/jobs?queue=email"
    assert viewer.get("/jobs?status=&sort=newest").headers["Location"] == "/jobs"
    # Through htmx the fragment comes back at once and the address bar gets the clean URL.
    fragment = viewer.get(form, headers={"HX-Request": "true", "HX-Target": "job-results"})
    assert fragment.status_code == 200
    assert fragment.headers["HX-Push-Url"] == "/jobs?queue=email"
    assert "HX-Push-Url" not in viewer.get("/jobs?queue=email").headers


def _link(html: str, rel: str) -> str:
    found = re.search(rf'rel="{rel}" href="([^"]+)"', html)
    assert found, rel
    return found.group(1).replace("&amp;", "&")


def test_previous_pages_walk_back_to_the_first(viewer: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        ids = [make_job(conn, queue="bulk") for _ in range(60)]
    newest = list(reversed(ids))
    first = viewer.get("/jobs?queue=bulk&page_size=25").get_data(as_text=True)
    assert rows(first) == newest[:25]
    assert 'rel="prev"' not in first
    assert "60 jobs in all" in first
    second = viewer.get(_link(first, "next")).get_data(as_text=True)
    third = viewer.get(_link(second, "next")).get_data(as_text=True)
    assert rows(third) == newest[50:]
    assert 'rel="next"' not in third
    back = viewer.get(_link(third, "prev")).get_data(as_text=True)
    assert rows(back) == newest[25:50]
    assert parse_qs(urlsplit(_link(third, "prev")).query)["queue"] == ["bulk"]
    again = viewer.get(_link(back, "prev")).get_data(as_text=True)
    assert rows(again) == newest[:25]
    assert 'rel="prev"' not in again
    assert rows(viewer.get(_link(again, "next")).get_data(as_text=True)) == newest[25:50]
    # Other sort orders page back the same way.
    oldest = viewer.get("/jobs?queue=bulk&page_size=25&sort=updated").get_data(as_text=True)
    later = viewer.get(_link(oldest, "next")).get_data(as_text=True)
    assert rows(viewer.get(_link(later, "prev")).get_data(as_text=True)) == rows(oldest)


def test_totals_are_exact_under_the_cap_and_say_when_they_are_not(
    viewer: Browser, engine: sa.Engine, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with engine.begin() as conn:
        for number in range(30):
            make_job(conn, payload={"batch": 1, "n": number})
        make_job(conn, payload={"batch": 2})
    html = viewer.get("/jobs?payload=batch%3D1").get_data(as_text=True)
    assert "30 jobs in all" in html
    assert "1 job in all" in viewer.get("/jobs?payload=batch%3D2").get_data(as_text=True)
    # Past the cap: an estimate on PostgreSQL ("about"), a floor on SQLite.
    monkeypatch.setattr(totals, "COUNT_CAP", 10)
    html = viewer.get("/jobs?payload=batch%3D1").get_data(as_text=True)
    if backend == "postgresql":
        assert re.search(r"about [\d,.k]+ jobs in all", html), html
    else:
        assert "more than 10 jobs in all" in html


# --- what a viewer cannot see, a viewer cannot find ----------------------------------------

_REFUSED = (
    "SMTPRecipientsRefused: ana.lopez@example.com was refused by mx.example.com\n"
    '  File "/srv/app/mailer/secret_relay.py", line 44, in send\n'
    "    relay.send(to)\n"
)


def test_a_viewers_error_search_matches_only_the_error_they_see(
    viewer: Browser, operator: Browser, engine: sa.Engine
) -> None:
    """Issue: `error=` searched the unmasked text, so a viewer could confirm the masked
    local part of an email (or read the stack trace they are not shown) letter by letter."""
    with engine.begin() as conn:
        current = make_job(conn, status="dead", last_error=_REFUSED)
        past = make_job(conn, status="dead", last_error="TimeoutError: took too long")
        conn.execute(
            sa.insert(job_attempts).values(job_id=past, attempt=1, outcome="failed", error=_REFUSED)
        )
    hidden = ("ana.lopez", "na.lop", "lopez@", "secret_relay", "relay.send")
    for text in hidden:
        for path in ("/jobs", "/dead"):
            page = viewer.get(f"{path}?error={quote(text)}")
            assert page.status_code == 200, text
            assert rows(page.get_data(as_text=True)) == [], (path, text)
        # Operators see all of it, so they find it.
        assert rows(operator.get(f"/jobs?error={quote(text)}").get_data(as_text=True)) == [
            past,
            current,
        ], text
    # What the viewer does see is found, in the current error and in past attempts'.
    for text in ("was refused by", "@example.com", "SMTPRecipientsRefused: a"):
        html = viewer.get(f"/jobs?error={quote(text)}").get_data(as_text=True)
        assert rows(html) == [past, current], text
    # The polling endpoint counts with the same rule.
    news = viewer.get(f"/jobs/news?error={quote('lopez')}").get_data(as_text=True)
    assert "new job" not in news
    news = operator.get(f"/jobs/news?error={quote('lopez')}").get_data(as_text=True)
    assert "2 new jobs" in news


def test_the_searchable_error_is_the_same_on_both_databases(conn: sa.Connection) -> None:
    samples = [
        _REFUSED,
        "x ana@b.c d.e+f@g.h @lead trail@ a@@b@",
        "-ana@x.com é.bob@x.com\u2028carl@x.com",
        'Traceback (most recent call last):\n  File "a.py"',
        "no stack, no mail",
        "",
    ]
    for text in samples:
        query = sa.select(searchable_error_sql(conn, sa.literal(text, sa.Text)))
        assert conn.execute(query).scalar_one() == searchable_error(text), text


def test_viewers_cannot_confirm_an_email_in_a_key_group_or_actor(
    viewer: Browser, operator: Browser, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        job_id = make_job(
            conn,
            idempotency_key="welcome:ana.lopez@example.com",
            group_key="user:ana.lopez@example.com",
        )
    for name, value in (
        ("key", "welcome:ana.lopez@example.com"),
        ("group", "user:ana.lopez@example.com"),
    ):
        for path in ("/jobs", "/jobs/news", "/dead"):
            page = viewer.get(f"{path}?{name}={quote(value)}")
            assert page.status_code == 400, (path, name)
            assert "email address" in page.get_data(as_text=True)
        html = operator.get(f"/jobs?{name}={quote(value)}").get_data(as_text=True)
        assert rows(html) == [job_id]
    # The job's page links viewers to the same key by job, which still works.
    assert rows(viewer.get(f"/jobs?key_of={job_id}").get_data(as_text=True)) == [job_id]
    assert rows(viewer.get(f"/jobs?group_of={job_id}").get_data(as_text=True)) == [job_id]
    # An audit actor that is an email is shown masked to viewers: not a filter for them.
    page = viewer.get("/audit?actor=ana.lopez%40example.com")
    assert page.status_code == 400
    assert "email address" in page.get_data(as_text=True)
    assert operator.get("/audit?actor=ana.lopez%40example.com").status_code == 200


def test_nobody_can_confirm_a_secret_in_a_key(
    viewer: Browser, operator: Browser, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        make_job(conn, idempotency_key="sync?token=abcdef123456")
    for who in (viewer, operator):
        page = who.get(f"/jobs?key={quote('sync?token=abcdef123456')}")
        assert page.status_code == 400
        assert "a secret" in page.get_data(as_text=True)


def test_a_viewer_sees_an_email_in_a_long_error_line_masked_not_cut(
    viewer: Browser, engine: sa.Engine
) -> None:
    """The list cut the error's first line to 160 characters before masking it, so an
    address crossing the cut showed the start of its local part."""
    with engine.begin() as conn:
        make_job(conn, status="dead", last_error="E: " + "x" * 150 + " ana.lopez@example.com")
    html = viewer.get("/jobs").get_data(as_text=True)
    assert "ana.lo" not in html
    assert "a***" in html


LONE_SURROGATE_TERM = 'a="\\ud800"'


def test_a_lone_surrogate_in_a_search_is_a_400_naming_the_parameter(
    viewer: Browser, app: Flask
) -> None:
    """`payload=a="\\ud800"` parses as JSON; the database then failed to encode it (500)."""
    for path in ("/jobs", "/jobs/news", "/dead"):
        page = viewer.get(f"{path}?payload={quote(LONE_SURROGATE_TERM)}")
        assert page.status_code == 400, path
        assert "payload" in page.get_data(as_text=True)
        assert "lone surrogate" in page.get_data(as_text=True)


@pytest.mark.parametrize("raw", [b"error=ab\xffcd", b"key=\xed\xa0\x80", b"\xff=1"])
def test_a_query_string_that_is_not_utf8_is_a_400(viewer: Browser, raw: bytes) -> None:
    """Raw bytes a server passes through (not percent-encoded) failed to decode: a 500."""
    page = viewer.client.get("/jobs", environ_overrides={"QUERY_STRING": raw.decode("latin-1")})
    assert page.status_code == 400
    assert "query is not valid UTF-8" in page.get_data(as_text=True)


@pytest.mark.parametrize("query", ["error=ab%ED%A0%80cd", "key=%ED%B0%80", "%ED%A0%80=1"])
def test_lone_surrogates_from_a_lenient_request_class_are_a_400(
    viewer: Browser, app: Flask, query: str
) -> None:
    """A host app's request class may decode invalid UTF-8 with `surrogateescape`; the
    lone surrogates must not reach a query (a 500 from the database driver)."""

    class Lenient(Request):
        @cached_property
        def args(self) -> ImmutableMultiDict[str, str]:  # type: ignore[override]
            text = self.query_string.decode("utf-8", "surrogateescape")
            return ImmutableMultiDict(
                parse_qsl(text, keep_blank_values=True, errors="surrogateescape")
            )

    app.request_class = Lenient
    page = viewer.get(f"/jobs?{query}")
    assert page.status_code == 400
    text = page.get_data(as_text=True)
    assert "lone surrogate" in text
    name = query.split("=", 1)[0]
    assert f"Bad input: {name if '%' not in name else 'query'} is not" in text
