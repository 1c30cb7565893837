"""Bad input (acceptance B1, B2, B3, B5, B7, B8, B9): refused identically on both databases,
with an error naming the field, and nothing written."""

from __future__ import annotations

import decimal
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import NewJob, ValidationError, enqueue, enqueue_many
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.retry import ExponentialBackoff
from tests.factories import make_job

NOW = datetime.now(UTC)

#: (case id, enqueue kwargs, field named in the error, text the message must contain)
BAD_INPUTS: list[tuple[str, dict[str, Any], str, str]] = [
    # B1: not JSON / not an object
    ("payload-list", {"payload": [1, 2]}, "payload", "JSON object"),
    ("payload-string", {"payload": '{"a": 1}'}, "payload", "JSON object"),
    ("payload-none", {"payload": None}, "payload", "JSON object"),
    ("datetime-value", {"payload": {"at": NOW}}, "payload.at", "datetime"),
    ("decimal-value", {"payload": {"price": decimal.Decimal("1.10")}}, "payload.price", "Decimal"),
    ("bytes-value", {"payload": {"blob": b"\x00\x01"}}, "payload.blob", "bytes"),
    ("set-value", {"payload": {"tags": {"a"}}}, "payload.tags", "set"),
    (
        "nested-object",
        {"payload": {"items": [{"ok": 1}, {"bad": object()}]}},
        "payload.items[1].bad",
        "object",
    ),
    ("int-key", {"payload": {1: "one"}}, "payload[1]", "keys must be strings"),
    ("nested-int-key", {"payload": {"a": {"b": {2: 3}}}}, "payload.a.b[2]", "keys must be strings"),
    # B2: oversized
    ("payload-1mb", {"payload": {"blob": "x" * 1_000_000}}, "payload", "bytes; the limit is"),
    ("payload-50mb", {"payload": {"blob": "x" * 50_000_000}}, "payload", "50,000,"),
    # B3: NUL, lone surrogates (what invalid UTF-8 becomes in a Python str)
    ("nul-in-value", {"payload": {"name": "a\x00b"}}, "payload.name", "NUL"),
    ("nul-in-key", {"payload": {"na\x00me": "x"}}, "payload key", "NUL"),
    ("nul-deep", {"payload": {"a": ["ok", {"b": "\x00"}]}}, "payload.a[1].b", "NUL"),
    ("surrogate-value", {"payload": {"name": "a\udcffb"}}, "payload.name", "surrogate"),
    ("surrogate-key", {"payload": {"\ud800": 1}}, "payload key", "surrogate"),
    # B5: NaN / Infinity
    ("nan", {"payload": {"x": float("nan")}}, "payload.x", "NaN"),
    ("infinity", {"payload": {"x": float("inf")}}, "payload.x", "inf"),
    ("minus-infinity", {"payload": {"x": [-float("inf")]}}, "payload.x[0]", "inf"),
    # B7: attempts and priority
    ("max-attempts-0", {"max_attempts": 0}, "max_attempts", "between 1 and 100"),
    ("max-attempts-negative", {"max_attempts": -1}, "max_attempts", "between 1 and 100"),
    ("max-attempts-string", {"max_attempts": "3"}, "max_attempts", "integer"),
    ("max-attempts-huge", {"max_attempts": 10**9}, "max_attempts", "between 1 and 100"),
    ("max-attempts-bool", {"max_attempts": True}, "max_attempts", "integer"),
    ("priority-low", {"priority": -1}, "priority", "between 0 and 9"),
    ("priority-high", {"priority": 10}, "priority", "between 0 and 9"),
    ("priority-float", {"priority": 1.5}, "priority", "integer"),
    ("timeout-zero", {"timeout": 0}, "timeout", "between 0 and 86400"),
    ("timeout-nan", {"timeout": float("nan")}, "timeout", "between 0 and 86400"),
    ("timeout-string", {"timeout": "5"}, "timeout", "number of seconds"),
    # B8: run_at
    ("run-at-100-years", {"run_at": NOW + timedelta(days=365 * 100)}, "run_at", "days ahead"),
    ("run-at-naive", {"run_at": datetime(2030, 1, 1)}, "run_at", "naive"),
    ("run-at-string", {"run_at": "2030-01-01T00:00:00Z"}, "run_at", "datetime"),
    # B9: names and keys
    ("type-empty", {"job_type": ""}, "job_type", "not a valid name"),
    ("type-10kb", {"job_type": "a" * 10_000}, "job_type", "not a valid name"),
    ("type-html", {"job_type": "<img src=x onerror=alert(1)>"}, "job_type", "not a valid name"),
    ("type-quote", {"job_type": "email'send"}, "job_type", "not a valid name"),
    ("type-newline", {"job_type": "email\nsend"}, "job_type", "not a valid name"),
    ("type-percent", {"job_type": "email%"}, "job_type", "not a valid name"),
    ("type-upper", {"job_type": "Email.Send"}, "job_type", "not a valid name"),
    ("type-not-str", {"job_type": 42}, "job_type", "string"),
    ("queue-empty", {"queue": ""}, "queue", "not a valid name"),
    ("queue-html", {"queue": "<b>"}, "queue", "not a valid name"),
    ("queue-101", {"queue": "q" * 101}, "queue", "not a valid name"),
    ("group-10kb", {"group_key": "g" * 10_000}, "group_key", "limit is 200"),
    ("group-newline", {"group_key": "a\nb"}, "group_key", "control characters"),
    ("group-empty", {"group_key": ""}, "group_key", "empty"),
    ("key-201", {"idempotency_key": "k" * 201}, "idempotency_key", "limit is 200"),
    ("key-nul", {"idempotency_key": "a\x00"}, "idempotency_key", "control characters"),
    ("key-surrogate", {"idempotency_key": "a\udcff"}, "idempotency_key", "surrogate"),
    ("key-not-str", {"idempotency_key": 42}, "idempotency_key", "string"),
]


def count_jobs(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar_one())


def call_enqueue(conn: sa.Connection, options: dict[str, Any]) -> int:
    payload = {"to_user_id": 1, "template": "welcome"}
    args: dict[str, Any] = {"job_type": "email.send", "payload": payload, **options}
    return enqueue(conn, args.pop("job_type"), args.pop("payload"), **args)


@pytest.mark.parametrize(
    ("options", "field", "text"),
    [pytest.param(opts, field, text, id=case) for case, opts, field, text in BAD_INPUTS],
)
def test_bad_input_is_refused_naming_the_field(
    engine: sa.Engine, options: dict[str, Any], field: str, text: str
) -> None:
    with engine.begin() as conn:
        with pytest.raises(ValidationError) as caught:
            call_enqueue(conn, options)
        # the caller's transaction is still usable: nothing half-done poisoned it
        good = call_enqueue(conn, {})
    assert caught.value.field.startswith(field), caught.value
    assert text in str(caught.value)
    assert str(caught.value).startswith(caught.value.field)
    assert count_jobs(engine) == 1
    assert good > 0


def test_a_bad_item_refuses_the_whole_batch_and_names_its_index(engine: sa.Engine) -> None:
    batch = [NewJob("test.ok", {"n": n}) for n in range(5)]
    batch.insert(3, NewJob("test.ok", {"n": float("nan")}))
    with engine.begin() as conn, pytest.raises(ValidationError) as caught:
        enqueue_many(conn, batch)
    assert caught.value.field == "jobs[3].payload.n"
    assert count_jobs(engine) == 0


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ({"payload": {}}, "needs job_type and payload"),
        ({"job_type": "a.b", "payload": {}, "colour": "red"}, "unknown option(s): colour"),
        ("email.send", "NewJob or a mapping"),
    ],
)
def test_malformed_batch_items_are_named(engine: sa.Engine, item: object, message: str) -> None:
    with engine.begin() as conn, pytest.raises(ValidationError) as caught:
        enqueue_many(conn, [NewJob("a.b", {}), item])  # type: ignore[list-item]
    assert caught.value.field == "jobs[1]"
    assert message in caught.value.message
    assert count_jobs(engine) == 0


def test_the_payload_limit_is_configurable(
    engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBDESK_MAX_PAYLOAD_BYTES", "2048")
    with engine.begin() as conn:
        enqueue(conn, "a.b", {"blob": "x" * 2000})
        with pytest.raises(ValidationError, match="the limit is 2,048 bytes"):
            enqueue(conn, "a.b", {"blob": "x" * 2100})
        with pytest.raises(ValidationError, match="the limit is 100 bytes"):
            enqueue(conn, "a.b", {"blob": "x" * 200}, max_payload_bytes=100)


def test_size_counts_utf8_bytes_not_characters(engine: sa.Engine) -> None:
    with engine.begin() as conn, pytest.raises(ValidationError, match="is 3,008 bytes"):
        enqueue(conn, "a.b", {"t": "€" * 1000}, max_payload_bytes=3000)


def test_accepted_edge_values(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        enqueue(conn, "a_b.c-d", {}, priority=0, max_attempts=1, queue="q" * 100)
        enqueue(conn, "a.b", {}, priority=9, max_attempts=100, timeout=86_400)
        enqueue(conn, "a.b", {}, group_key="<img src=x onerror=alert(1)> 'quoted' 100%_")
        enqueue(conn, "a.b", {"literal": "\\u0000 is only text here"})
        enqueue(conn, "a.b", {}, run_at=NOW + timedelta(days=365))
        enqueue(conn, "a.b", {}, run_at=NOW - timedelta(days=3650))
    assert count_jobs(engine) == 6


def test_check_constraints_back_up_validation_on_both_databases(engine: sa.Engine) -> None:
    for bad in (
        {"priority": 10},
        {"max_attempts": 0},
        {"attempts": -1},
        {"attempts": 6, "max_attempts": 5},
        {"status": "bogus"},
        {"job_type": ""},
        {"timeout_seconds": 0},
    ):
        with engine.connect() as conn:
            with pytest.raises(sa.exc.IntegrityError):
                make_job(conn, **bad)
            conn.rollback()
    assert count_jobs(engine) == 0


def test_backoff_at_attempt_60_is_capped_not_overflowing() -> None:
    backoff = ExponentialBackoff(timedelta(seconds=1), timedelta(hours=1))
    assert backoff.delay(60) <= timedelta(hours=1)


def _nested(levels: int) -> dict[str, object]:
    document: dict[str, object] = {}
    inner = document
    for _ in range(levels - 1):
        child: dict[str, object] = {}
        inner["a"] = child
        inner = child
    return document


@pytest.mark.parametrize("levels", [101, 500, 1000, 5000])
def test_payloads_nested_past_the_limit_are_refused(conn: sa.Connection, levels: int) -> None:
    with pytest.raises(ValidationError, match="nested more than 100 levels deep") as caught:
        enqueue(conn, "test.noop", _nested(levels))
    assert caught.value.field == "payload"
    assert conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar() == 0


def test_a_payload_at_the_limit_is_accepted(conn: sa.Connection) -> None:
    assert enqueue(conn, "test.noop", _nested(100)) > 0


@pytest.mark.parametrize(
    "number", [2**63, -(2**63) - 1, 10**5000], ids=["2^63", "-2^63-1", "5000 digits"]
)
def test_integers_beyond_64_bits_are_refused_naming_the_field(
    conn: sa.Connection, number: int
) -> None:
    with pytest.raises(ValidationError, match="beyond 64 bits") as caught:
        enqueue(conn, "test.noop", {"ids": [1, number]})
    assert caught.value.field == "payload.ids[1]"


def test_digits_inside_strings_are_fine(conn: sa.Connection) -> None:
    assert enqueue(conn, "test.noop", {"card_ref": "12345678901234567890123", "n": 2**63 - 1})
