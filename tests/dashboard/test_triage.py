"""Dead-letter triage in shared/triage.py on both databases (R20, O2, O3)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.errors import ConflictError, NotFoundError, ValidationError
from jobdesk.shared.core.masking import fingerprint
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.payload_checks import PayloadErrors
from jobdesk.shared.operator.commands import triage
from jobdesk.shared.operator.filters import JobFilters
from jobdesk.shared.operator.queries.audit import entries_for_job
from jobdesk.shared.webhooks.models import webhook_endpoints
from tests.factories import job_row, make_job

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def dead(conn: sa.Connection, job_type: str = "webhook.deliver", **fields: object) -> int:
    error = str(fields.pop("last_error", "TimeoutError: crm took longer than 10s (job 7)"))
    values: dict[str, object] = {
        "job_type": job_type,
        "queue": "webhooks",
        "status": "dead",
        "attempts": 3,
        "max_attempts": 3,
        "payload": {"endpoint": "crm", "event": "user.created", "data": {"id": 1}},
        "last_error": error,
        "error_fingerprint": fingerprint(error),
        "finished_at": NOW - timedelta(minutes=5),
        "idempotency_key": None,
    }
    values.update(fields)
    return make_job(conn, **values)


def test_retry_creates_a_new_job_and_marks_the_dead_one(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        old = dead(conn, idempotency_key="webhook:user:1", group_key="user:1", priority=2)
    with engine.begin() as conn:
        new = triage.retry_dead(conn, old, actor="ana", reason="CRM is back", now=NOW)
    with engine.connect() as conn:
        before, after = job_row(conn, old), job_row(conn, new)
        entries = entries_for_job(conn, old)
    assert new != old
    assert (before.status, before.resolution, before.resolved_by) == ("dead", "requeued", "ana")
    assert before.resolution_reason == "CRM is back"
    assert before.resolved_at == NOW
    assert (after.status, after.retried_from_id, after.attempts) == ("queued", old, 0)
    for name in (
        "job_type",
        "queue",
        "payload",
        "priority",
        "max_attempts",
        "group_key",
        "idempotency_key",
    ):
        assert getattr(after, name) == getattr(before, name)
    assert after.next_run_at == NOW
    assert [(e.action, e.actor, e.new_job_id) for e in entries] == [("retry", "ana", new)]


def test_second_operator_gets_a_conflict(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        old = dead(conn)
    with engine.begin() as conn:
        triage.retry_dead(conn, old, actor="ana", now=NOW)
    with engine.begin() as conn, pytest.raises(ConflictError, match="already requeued by ana"):
        triage.fix_and_retry(
            conn, old, {"endpoint": "crm", "event": "x", "data": {}}, actor="bob", now=NOW
        )
    with engine.begin() as conn, pytest.raises(ConflictError):
        triage.ignore_dead(conn, old, actor="bob", reason="dup", now=NOW)
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar_one() == 2


def test_only_dead_jobs_and_existing_ones(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        queued = make_job(conn, job_type="email.send")
    with engine.begin() as conn, pytest.raises(ConflictError, match="queued, not dead"):
        triage.retry_dead(conn, queued, actor="ana", now=NOW)
    with engine.begin() as conn, pytest.raises(NotFoundError):
        triage.retry_dead(conn, 999, actor="ana", now=NOW)


def test_unknown_type_is_refused_with_a_clear_message(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        old = dead(conn, job_type="legacy.sync")
    with engine.begin() as conn, pytest.raises(ValidationError, match=r"legacy\.sync.*not known"):
        triage.retry_dead(conn, old, actor="ana", now=NOW)
    with engine.connect() as conn:
        assert job_row(conn, old).resolution is None


def test_fix_validates_restores_masked_secrets_and_audits_a_masked_diff(
    engine: sa.Engine,
) -> None:
    payload = {
        "endpoint": "crm",
        "event": "user.created",
        "data": {"id": 1},
        "token": "s3cr3t-value",
        "to": "x",
    }
    with engine.begin() as conn:
        old = dead(conn, payload=payload)
    bad = {"endpoint": "CRM!", "data": {"id": 1}}
    with engine.begin() as conn, pytest.raises(PayloadErrors) as caught:
        triage.fix_and_retry(conn, old, bad, actor="ana", now=NOW)
    assert {e.field for e in caught.value.errors} == {"payload.endpoint", "payload.event"}
    with engine.begin() as conn, pytest.raises(ValidationError, match="NaN"):
        triage.fix_and_retry(conn, old, {**payload, "n": float("nan")}, actor="ana", now=NOW)
    edited = {
        "endpoint": "crm-v2",
        "event": "user.created",
        "data": {"id": 1},
        "token": "***",
        "to": "x",
    }
    # Moving the job keeps the stored secret only when the operator says so (issue 12
    # #13: it used to be restored and sent to the new endpoint silently).
    with engine.begin() as conn, pytest.raises(ValidationError, match="destination changed"):
        triage.fix_and_retry(conn, old, edited, actor="ana", reason="moved", now=NOW)
    with engine.begin() as conn:
        new = triage.fix_and_retry(
            conn, old, edited, actor="ana", reason="moved", now=NOW, keep_secrets=True
        )
    with engine.connect() as conn:
        fixed = job_row(conn, new)
        entry = entries_for_job(conn, old)[0]
        assert job_row(conn, old).resolution == "fixed"
        assert job_row(conn, old).payload == payload
    assert fixed.payload["token"] == "s3cr3t-value"
    assert fixed.payload["endpoint"] == "crm-v2"
    assert entry.action == "fix_retry"
    assert entry.details == {
        "diff": {
            "changed": {"endpoint": {"before": "crm", "after": "crm-v2"}},
            "added": {},
            "removed": {},
        },
        "kept_secrets": ["token"],
        "kept_secrets_for_new_destination": True,
    }
    assert "s3cr3t" not in str(entry.details)


def test_secret_change_is_diffed_masked(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        old = dead(conn, job_type="report.generate", payload={"report": "a", "password": "old"})
    with engine.begin() as conn:
        triage.fix_and_retry(conn, old, {"report": "a", "password": "new"}, actor="ana", now=NOW)
    with engine.connect() as conn:
        entry = entries_for_job(conn, old)[0]
    # The change is listed although masking makes both sides look alike.
    assert entry.details == {
        "diff": {
            "changed": {"password": {"before": "***", "after": "***", "masked_change": True}},
            "added": {},
            "removed": {},
        }
    }


@pytest.mark.parametrize(
    ("reason", "message"), [("", "required"), ("   ", "required"), ("x" * 100_000, "limit")]
)
def test_ignore_needs_a_bounded_reason(engine: sa.Engine, reason: str, message: str) -> None:
    with engine.begin() as conn:
        old = dead(conn)
    with engine.begin() as conn, pytest.raises(ValidationError, match=message):
        triage.ignore_dead(conn, old, actor="ana", reason=reason, now=NOW)


def test_ignore_keeps_the_job_findable(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        old = dead(conn)
    with engine.begin() as conn:
        triage.ignore_dead(conn, old, actor="ana", reason="<script>x</script> test data", now=NOW)
    with engine.connect() as conn:
        row = job_row(conn, old)
    assert (row.status, row.resolution, row.resolution_reason) == (
        "dead",
        "ignored",
        "<script>x</script> test data",
    )


def test_bulk_retry_previews_caps_and_is_idempotent(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.insert(webhook_endpoints).values(
                name="crm", url="https://x", secret="s", paused=True
            )
        )
        ids = [dead(conn) for _ in range(7)]
        ids.append(dead(conn, payload={"endpoint": "billing", "event": "e", "data": {}}))
        ids.append(dead(conn, job_type="legacy.sync"))
        dead(conn, job_type="email.send", last_error="SMTP 550 mailbox unavailable")
    filters = JobFilters(queue="webhooks", error="longer than")
    with engine.connect() as conn:
        impact = triage.preview_bulk(conn, triage.Selection(filters=filters), now=NOW, cap=5)
    assert (impact.matching, impact.selected, impact.capped) == (9, 5, True)
    assert impact.paused_endpoint == 5
    assert impact.id_range == (ids[0], ids[4])
    selection = triage.Selection(filters=filters, id_range=impact.id_range)
    with engine.begin() as conn:
        result = triage.bulk_retry(conn, selection, actor="ana", now=NOW, cap=5)
    assert (result.done, result.already_resolved, result.unknown_type) == (5, 0, 0)
    with engine.begin() as conn:  # the same confirmation submitted twice
        again = triage.bulk_retry(conn, selection, actor="ana", now=NOW, cap=5)
    assert (again.done, again.already_resolved) == (0, 0)
    with engine.connect() as conn:
        rest = triage.preview_bulk(conn, triage.Selection(filters=filters), now=NOW)
    assert (rest.matching, rest.unknown_types, rest.types) == (
        4,
        {"legacy.sync": 1},
        {"webhook.deliver": 3, "legacy.sync": 1},
    )
    with engine.begin() as conn:
        picked = triage.bulk_retry(
            conn, triage.Selection(ids=(ids[0], ids[5], ids[8])), actor="bob", now=NOW
        )
    assert (picked.done, picked.already_resolved, picked.unknown_type) == (1, 1, 1)


def test_bulk_ignore_and_cap_on_explicit_ids(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        ids = [dead(conn) for _ in range(3)]
    with engine.begin() as conn:
        result = triage.bulk_ignore(
            conn, triage.Selection(ids=tuple(ids)), actor="ana", reason="test noise", now=NOW
        )
    assert (result.done, result.already_resolved) == (3, 0)
    with pytest.raises(ValidationError, match="at most 1,000"):
        triage.Selection(ids=tuple(range(1, 1002)))
    with engine.begin() as conn, pytest.raises(ValidationError, match="reason"):
        triage.bulk_ignore(conn, triage.Selection(ids=(ids[0],)), actor="a", reason="", now=NOW)
