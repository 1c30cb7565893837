"""`@job(validate=fn)` (R20): a type's own payload rules run before a job is enqueued
and before a fixed payload is saved, naming each field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import NewJob, ValidationError, enqueue, enqueue_many, job
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.payload_checks import PayloadErrors, check_payload
from jobdesk.shared.operator.commands.triage import validate_fixed_payload
from jobdesk.worker.registry import Registry


def _invoice_rules(payload: Mapping[str, Any]) -> list[ValidationError]:
    problems = []
    if not isinstance(payload.get("invoice_id"), int):
        problems.append(ValidationError("payload.invoice_id", "must be an invoice number"))
    if payload.get("currency") not in {"EUR", "USD"}:
        problems.append(ValidationError("payload.currency", "must be EUR or USD"))
    return problems


@job("t.invoice", validate=_invoice_rules, target=Registry())
def _invoice(payload: dict[str, Any], ctx: object) -> None:
    """Never run here: only its declaration matters."""


def _refuse_plainly(payload: Mapping[str, Any]) -> None:
    if "amount" not in payload:
        raise ValueError("an amount is required")


@job("t.refund", validate=_refuse_plainly, target=Registry())
def _refund(payload: dict[str, Any], ctx: object) -> None:
    """Never run here."""


def _count(conn: sa.Connection) -> int:
    return int(conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar_one())


def test_enqueue_refuses_what_the_type_refuses_naming_every_field(conn: sa.Connection) -> None:
    with pytest.raises(PayloadErrors) as refused:
        enqueue(conn, "t.invoice", {"invoice_id": "x", "currency": "GBP"})
    assert [(e.field, e.message) for e in refused.value.errors] == [
        ("payload.invoice_id", "must be an invoice number"),
        ("payload.currency", "must be EUR or USD"),
    ]
    assert _count(conn) == 0
    assert enqueue(conn, "t.invoice", {"invoice_id": 7, "currency": "EUR"}) > 0


def test_enqueue_many_names_the_item_and_writes_nothing(conn: sa.Connection) -> None:
    good = NewJob("t.invoice", {"invoice_id": 1, "currency": "USD"})
    bad = NewJob("t.invoice", {"invoice_id": 2, "currency": "JPY"})
    with pytest.raises(ValidationError) as refused:
        enqueue_many(conn, [good, good, bad])
    assert refused.value.field == "jobs[2].payload.currency"
    assert _count(conn) == 0


def test_a_plain_value_error_names_the_payload(conn: sa.Connection) -> None:
    with pytest.raises(ValidationError, match="an amount is required") as refused:
        enqueue(conn, "t.refund", {})
    assert refused.value.field == "payload"
    assert check_payload("t.refund", {"amount": 3}) == []


def test_the_fix_form_applies_the_same_rules() -> None:
    with pytest.raises(PayloadErrors) as refused:
        validate_fixed_payload("t.invoice", {"invoice_id": 3})
    assert [e.field for e in refused.value.errors] == ["payload.currency"]
    assert validate_fixed_payload("t.invoice", {"invoice_id": 3, "currency": "EUR"})


def test_a_webhook_with_both_data_and_data_ref_is_refused_before_it_can_die(
    conn: sa.Connection,
) -> None:
    both = {"endpoint": "crm", "event": "user.created", "data": {}, "data_ref": {"id": 1}}
    with pytest.raises(ValidationError, match="not both") as refused:
        enqueue(conn, "webhook.deliver", both)
    assert refused.value.field == "payload.data_ref"
    with pytest.raises(PayloadErrors, match="not both"):
        validate_fixed_payload("webhook.deliver", both)
    assert _count(conn) == 0
