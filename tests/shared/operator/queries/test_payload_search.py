"""Payload search (`payload=user_id=42`): the term syntax, what matches on each database,
the index each uses, the SQLite terms kept by triggers, and what may not be searched."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from jobdesk import ValidationError
from jobdesk.shared.core.db import make_engine
from jobdesk.shared.core.driver.postgresql import Explain
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.payload_terms import payload_terms
from jobdesk.shared.operator.filters import JobFilters
from jobdesk.shared.operator.queries.jobs import filter_conditions, list_jobs
from jobdesk.shared.operator.queries.payload_search import (
    MAX_QUERY_CHARS,
    MAX_TERM_CHARS,
    Term,
    format_terms,
    parse_terms,
)
from jobdesk.shared.schema import metadata
from jobdesk.shared.settings import Settings
from tests.factories import make_job

NOW = datetime(2030, 6, 1, 10, 0, tzinfo=UTC)


def found(conn: sa.Connection, search: str, **args: str) -> list[int]:
    filters = JobFilters.from_args({"payload": search, "sort": "oldest", **args})
    return [job.id for job in list_jobs(conn, filters, now=NOW).items]


@pytest.fixture
def customers(engine: sa.Engine) -> dict[str, int]:
    payloads: dict[str, Any] = {
        "number": {"user_id": 42, "endpoint": "crm"},
        "text": {"user_id": "42", "endpoint": "billing"},
        "real": {"user_id": 42.0},
        "other": {"user_id": 420, "note": "user_id=42"},
        "nested": {"customer": {"id": 7, "name": "Ana Lopez"}, "active": True},
        "flags": {"active": "true", "parent": None, "ratio": 0.25},
        "array": {"user_id": [42], "tags": ["crm"]},
    }
    with engine.begin() as conn:
        return {name: make_job(conn, payload=payload) for name, payload in payloads.items()}


def test_a_bare_number_matches_the_number_and_its_text(
    conn: sa.Connection, customers: dict[str, int]
) -> None:
    c = customers
    assert found(conn, "user_id=42") == [c["number"], c["text"], c["real"]]
    # The text it also matches is the one typed ("42.0"), not the number's shortest form.
    assert found(conn, "user_id=42.0") == [c["number"], c["real"]]
    assert found(conn, 'user_id="42"') == [c["text"]]
    assert found(conn, "user_id=420") == [c["other"]]


def test_terms_are_anded_and_strings_nested_keys_and_literals_match(
    conn: sa.Connection, customers: dict[str, int]
) -> None:
    c = customers
    assert found(conn, "user_id=42 endpoint=crm") == [c["number"]]
    assert found(conn, "endpoint=crm") == [c["number"]]
    assert found(conn, "customer.id=7") == [c["nested"]]
    assert found(conn, 'customer.name="Ana Lopez"') == [c["nested"]]
    assert found(conn, "active=true") == [c["nested"], c["flags"]]
    assert found(conn, 'active="true"') == [c["flags"]]
    assert found(conn, "parent=null") == [c["flags"]]
    assert found(conn, "ratio=0.25") == [c["flags"]]
    # Array elements are not terms; a value is not found as part of another one.
    assert found(conn, "tags=crm") == []
    assert found(conn, "note=42") == []
    assert found(conn, "customer=7") == []


def test_payload_search_combines_with_the_other_filters(
    conn: sa.Connection, customers: dict[str, int]
) -> None:
    assert found(conn, "user_id=42", status="queued") == [
        customers["number"],
        customers["text"],
        customers["real"],
    ]
    assert found(conn, "user_id=42", status="dead") == []


def test_plain_sql_inserts_are_found_and_broken_documents_do_not_fail_the_insert(
    engine: sa.Engine, backend: str
) -> None:
    with engine.begin() as conn:
        plain = conn.execute(
            sa.text(
                "INSERT INTO jobdesk_jobs (job_type, payload) VALUES ('app.sync', :p) RETURNING id"
            ),
            {"p": json.dumps({"user_id": 42, "customer": {"id": 9}})},
        ).scalar_one()
        if backend == "sqlite":
            # Not JSON at all, or not an object: the job is stored, it just has no terms.
            for text in ("not json", "[1, 2]", "7"):
                conn.execute(
                    sa.text("INSERT INTO jobdesk_jobs (job_type, payload) VALUES ('app.x', :p)"),
                    {"p": text},
                )
    with engine.connect() as conn:
        assert found(conn, "user_id=42 customer.id=9") == [plain]


@pytest.mark.sqlite_only
def test_sqlite_terms_follow_payload_edits_and_deletes(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        job_id = make_job(conn, payload={"user_id": 1, "long": "x" * 201, "a.b": 2})
        kept = make_job(conn, payload={"user_id": 1})
    with engine.connect() as conn:
        terms = conn.execute(
            sa.select(payload_terms.c.path, payload_terms.c.value).where(
                payload_terms.c.job_id == job_id
            )
        ).all()
        # Too long to be a search value, or a key with a dot: not indexed.
        assert terms == [("user_id", "n1")]
    with engine.begin() as conn:
        conn.execute(sa.update(jobs).where(jobs.c.id == job_id).values(payload={"user_id": 2}))
        # A claim-like update that does not set the payload leaves the terms alone.
        conn.execute(sa.update(jobs).where(jobs.c.id == kept).values(status="running"))
    with engine.connect() as conn:
        assert found(conn, "user_id=1") == [kept]
        assert found(conn, "user_id=2") == [job_id]
    with engine.begin() as conn:
        conn.execute(sa.delete(jobs).where(jobs.c.id == job_id))
    with engine.connect() as conn:
        count = sa.select(sa.func.count()).select_from(payload_terms)
        assert conn.execute(count.where(payload_terms.c.job_id == job_id)).scalar_one() == 0


def plan(conn: sa.Connection, search: str) -> str:
    filters = JobFilters.from_args({"payload": search})
    query = sa.select(jobs.c.id).where(*filter_conditions(conn, filters, NOW))
    if conn.dialect.name == "postgresql":
        # Tiny tables are read sequentially whatever the indexes; make that a last resort.
        conn.execute(sa.text("SET LOCAL enable_seqscan = off"))
        (document,) = conn.execute(Explain(query)).one()
        return json.dumps(document)
    compiled = query.compile(conn, compile_kwargs={"literal_binds": True})
    return "\n".join(row[-1] for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}"))


def test_the_search_uses_the_index_on_each_database(
    conn: sa.Connection, customers: dict[str, int], backend: str
) -> None:
    text = plan(conn, "user_id=42 endpoint=crm")
    if backend == "postgresql":
        assert "ix_jobdesk_jobs_payload" in text, text
        assert '"Seq Scan"' not in text, text
    else:
        assert "jobdesk_payload_terms USING PRIMARY KEY" in text, text
        assert "SCAN jobdesk_payload_terms" not in text, text


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("user_id", "not a key=value term"),
        ("user_id=42 junk", "not a key=value term"),
        ("a.b.c=1", "a key is"),
        ("<b>=1", "a key is"),
        ("n=99999999999999999999", "64 bits"),
        ('n="unterminated', "not a key=value term"),
        ("a=1 b=2 c=3 d=4 e=5 f=6", "the limit is 5"),
        ("name=" + "x" * 201, "limited to 200"),
        ('name="\\ud800"', "lone surrogate"),  # valid JSON, no text a database takes
        ('name="a\\udfffb"', "lone surrogate"),
    ],
)
def test_bad_terms_name_the_parameter(raw: str, message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        JobFilters.from_args({"payload": raw})
    assert caught.value.field == "payload"
    assert message in caught.value.message


def test_terms_round_trip_through_the_url() -> None:
    raw = 'user_id=42 name="Ana Lopez" code="42" flag=true tag=crm customer.id=7'
    with pytest.raises(ValidationError):  # six terms
        JobFilters.from_args({"payload": raw})
    raw = 'user_id=42 name="Ana Lopez" code="42" flag=true customer.id=7'
    filters = JobFilters.from_args({"payload": raw})
    assert filters.to_args() == {"payload": raw}
    assert JobFilters.from_args(filters.to_args()) == filters
    assert parse_terms("  a=1   a=1 ") == parse_terms("a=1")


#: 256 KiB: what one request can carry.
HUGE = 256 * 1024


@pytest.mark.parametrize(
    "raw",
    [
        "a" * HUGE,  # one long key without `=`: ~8 s per 30,000 characters before
        'a="' + "\\x" * (HUGE // 2),  # an unterminated quoted value full of escapes
        "a" + "=a" * (HUGE // 2),
        " a" * (HUGE // 2),
        "a=1 " * (HUGE // 4),
        "a=" + "b" * HUGE,
    ],
)
def test_a_huge_search_is_refused_at_once_naming_the_limit(raw: str) -> None:
    started = time.perf_counter()
    with pytest.raises(ValidationError) as caught:
        parse_terms(raw)
    assert time.perf_counter() - started < 0.5
    assert caught.value.field == "payload"
    assert f"limited to {MAX_QUERY_CHARS:,} characters" in caught.value.message


@pytest.mark.parametrize(
    "raw",
    [
        "a" * MAX_QUERY_CHARS,
        'a="' + "\\x" * (MAX_QUERY_CHARS // 2 - 2),
        "a" + "=a" * (MAX_QUERY_CHARS // 2 - 1),
        "a=" + "b" * (MAX_QUERY_CHARS - 2),
        'a="' + "b" * (MAX_QUERY_CHARS - 4) + '"',
        "a" * 1000 + "=1 " + "b" * 990,
    ],
)
def test_the_longest_allowed_searches_parse_in_linear_time(raw: str) -> None:
    """Within the limit too: the tokenizer reads each character once (a backtracking
    pattern took quadratic time on these)."""
    started = time.perf_counter()
    with pytest.raises(ValidationError):
        parse_terms(raw)
    assert time.perf_counter() - started < 0.05


def test_a_long_term_is_refused_naming_the_term_limit() -> None:
    with pytest.raises(ValidationError) as caught:
        parse_terms('name="' + "x" * MAX_TERM_CHARS + '"')
    assert f"a term is limited to {MAX_TERM_CHARS}" in caught.value.message


#: The characters the syntax cares about, and a few it should not trip over.
_SYNTAX = st.text(alphabet='ab1.-_="\\ \t\u00e9\ud800\x00', max_size=MAX_QUERY_CHARS + 50)


@settings(max_examples=300, deadline=None)
@given(raw=_SYNTAX)
def test_any_search_text_parses_or_is_refused_quickly(raw: str) -> None:
    started = time.perf_counter()
    terms: tuple[Term, ...] | ValidationError
    try:
        terms = parse_terms(raw)
    except ValidationError as exc:
        terms = exc
    if isinstance(terms, ValidationError):
        assert terms.field == "payload"
    else:
        # What parsed reads back as the same terms (the URL round trip).
        assert parse_terms(format_terms(terms)) == terms
    assert time.perf_counter() - started < 0.2


@pytest.mark.parametrize(
    "raw",
    [
        "password=hunter2",
        "api_key=abc",
        "credentials.id=7",
        "customer.token=x",
        "note=sk_live_abcdefghijklmnop",
        "card=4111111111111111",  # also matches the string, which is masked
    ],
)
def test_nobody_can_probe_a_masked_secret(raw: str) -> None:
    for mask_emails in (False, True):
        with pytest.raises(ValidationError) as caught:
            JobFilters.from_args({"payload": raw}, mask_emails=mask_emails)
        assert caught.value.field == "payload"
        assert "masked" in caught.value.message


def test_viewers_cannot_probe_an_email_operators_can() -> None:
    raw = "email=ana.lopez@example.com"
    assert JobFilters.from_args({"payload": raw}).payload
    with pytest.raises(ValidationError) as caught:
        JobFilters.from_args({"payload": raw}, mask_emails=True)
    assert "email" in caught.value.message


@pytest.mark.sqlite_only
def test_create_all_installs_the_sqlite_triggers_too(backend: str, tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'created.db'}", settings=Settings())
    try:
        metadata.create_all(engine)
        with engine.begin() as conn:
            job_id = make_job(conn, payload={"user_id": 5})
        with engine.connect() as conn:
            assert found(conn, "user_id=5") == [job_id]
    finally:
        engine.dispose()
