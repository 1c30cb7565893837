"""`webhook.deliver` end to end through `drain()` against a real HTTP receiver (E1, E3, F2,
B10, pause/resume, breaker, rotation), on both databases."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import ValidationError, enqueue
from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.core.claim import claim
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.models import effects, jobs
from jobdesk.shared.core.transitions import rescue_expired
from jobdesk.shared.webhooks.deliveries import list_deliveries
from jobdesk.shared.webhooks.endpoints import (
    add_endpoint,
    get_endpoint,
    pause_endpoint,
    resume_endpoint,
    rotate_secret,
)
from jobdesk.shared.webhooks.models import webhook_deliveries, webhook_endpoints
from jobdesk.worker.context import JobContext
from jobdesk.worker.jobs import set_data_resolver
from jobdesk.worker.jobs.webhook import deliver_webhook
from jobdesk.worker.registry import registry
from jobdesk.worker.testing import drain
from tests.asyncdb import on_one_loop
from tests.factories import job_row, make_job
from tests.worker.jobs.conftest import add_test_endpoint
from tests.worker.jobs.receiver import Receiver
from tests.worker.jobs.smtp_server import free_port

pytestmark = pytest.mark.usefixtures("jobs_env")

EVENT = {"endpoint": "crm", "event": "user.created", "data": {"user_id": 42}}


def add(engine: sa.Engine, payload: dict[str, Any] | None = None, **kw: Any) -> int:
    with engine.begin() as conn:
        return enqueue(conn, "webhook.deliver", payload or EVENT, **kw)


def row(engine: sa.Engine, job_id: int) -> Any:
    with engine.connect() as conn:
        return job_row(conn, job_id)


def deliveries(engine: sa.Engine, job_id: int) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return list_deliveries(conn, job_id)


def later(engine: sa.Engine, **delta: float) -> Any:
    with engine.connect() as conn:
        return db_now(conn) + timedelta(**delta)


def endpoint_at(engine: sa.Engine, receiver: Receiver, path: str, name: str = "crm") -> None:
    receiver.secrets.append(add_test_endpoint(engine, name, receiver.url(path)))


def test_2xx_is_delivered_signed_and_logged(engine: sa.Engine, receiver: Receiver) -> None:
    endpoint_at(engine, receiver, "/ok")
    job_id = add(engine)
    assert drain(engine).succeeded == 1
    [seen] = receiver.seen
    assert seen.verified
    body = json.loads(seen.body)
    assert body["type"] == "user.created"
    assert body["data"] == {"user_id": 42}
    assert body["timestamp"]
    job = row(engine, job_id)
    assert job.status == "succeeded"
    assert job.result["webhook_id"] == seen.webhook_id
    assert seen.webhook_id.startswith("msg_")
    [logged] = deliveries(engine, job_id)
    assert logged["outcome"] == "delivered"
    assert logged["status_code"] == 200
    assert logged["latency_ms"] > 0
    assert logged["webhook_id"] == seen.webhook_id
    assert logged["response_excerpt"] == "ok"
    # The same event again (new job, no key) is a new event; the same job re-run is not.
    assert receiver.applied[seen.webhook_id] == 1


@pytest.mark.postgresql_only
def test_a_delivery_is_logged_and_recorded_in_the_completions_transaction(
    engine: sa.Engine, receiver: Receiver
) -> None:
    endpoint_at(engine, receiver, "/ok")
    others = [add(engine, {**EVENT, "data": {"user_id": n}}) for n in range(3)]
    job_id = add(engine)
    # One batch: the deliveries' writes go out together (one statement for all four).
    assert drain(engine).succeeded == 4
    xmin = sa.literal_column("xmin::text", sa.Text)
    with engine.connect() as conn:
        written = {
            conn.execute(sa.select(xmin).select_from(jobs).where(jobs.c.id == job_id)).scalar(),
            conn.execute(
                sa.select(xmin)
                .select_from(webhook_deliveries)
                .where(webhook_deliveries.c.job_id == job_id)
            ).scalar(),
            conn.execute(
                sa.select(xmin).select_from(effects).where(effects.c.job_id == job_id)
            ).scalar(),
        }
    # One transaction: a crash before it commits loses the three together.
    assert len(written) == 1
    assert None not in written
    assert len(deliveries(engine, others[0])) == 1
    with engine.connect() as conn:
        logged = conn.execute(
            sa.select(sa.func.count()).select_from(webhook_deliveries)
        ).scalar_one()
    assert logged == 4


def test_request_goes_to_the_vetted_address_with_the_original_host_header(
    engine: sa.Engine, receiver: Receiver
) -> None:
    receiver.secrets.append(
        add_test_endpoint(engine, "crm", f"http://localhost:{receiver.port}/ok?src=jobdesk")
    )
    add(engine)
    assert drain(engine).succeeded == 1
    [seen] = receiver.seen
    assert seen.host == f"localhost:{receiver.port}"
    assert seen.verified


def test_data_ref_is_resolved_at_delivery_time(engine: sa.Engine, receiver: Receiver) -> None:
    endpoint_at(engine, receiver, "/ok")
    ref = {"endpoint": "crm", "event": "user.created", "data_ref": {"user_id": 42}}
    add(engine, ref)
    drain(engine)
    assert json.loads(receiver.seen[0].body)["data"] == {"user_id": 42}  # no resolver: as is
    set_data_resolver(lambda event, r: {"id": r["user_id"], "email": "ana@example.com"})
    add(engine, ref)
    drain(engine)
    assert json.loads(receiver.seen[1].body)["data"] == {"id": 42, "email": "ana@example.com"}


@pytest.mark.parametrize("path", ["/500", "/429"])
def test_5xx_and_429_retry(engine: sa.Engine, receiver: Receiver, path: str) -> None:
    endpoint_at(engine, receiver, path)
    job_id = add(engine)
    drain(engine)
    job = row(engine, job_id)
    assert job.status == "failed"
    assert f"HTTP {path[1:]}" in job.last_error
    assert job.next_run_at >= later(engine, seconds=50)  # the webhook schedule: ~1 min first
    [logged] = deliveries(engine, job_id)
    assert logged["outcome"] == "retry"
    assert logged["status_code"] == int(path[1:])


def test_503_retry_after_is_honoured(engine: sa.Engine, receiver: Receiver) -> None:
    endpoint_at(engine, receiver, "/503")
    job_id = add(engine)
    before = later(engine)
    drain(engine)
    job = row(engine, job_id)
    assert job.status == "failed"
    assert "Retry-After 7" in job.last_error
    wait = (job.next_run_at - before).total_seconds()
    assert 6 <= wait <= 10


def test_retry_after_is_capped(
    engine: sa.Engine, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBDESK_WEBHOOK_RETRY_AFTER_CAP_SECONDS", "2")
    endpoint_at(engine, receiver, "/503")
    job_id = add(engine)
    before = later(engine)
    drain(engine)
    assert (row(engine, job_id).next_run_at - before).total_seconds() <= 4


def test_410_disables_the_endpoint_and_holds_its_other_jobs(
    engine: sa.Engine, receiver: Receiver
) -> None:
    endpoint_at(engine, receiver, "/410")
    gone = add(engine)
    drain(engine, max_jobs=1)
    job = row(engine, gone)
    assert job.status == "dead"
    assert "410" in job.last_error
    with engine.connect() as conn:
        endpoint = get_endpoint(conn, "crm")
        actions = conn.execute(sa.select(audit_log.c.action)).scalars().all()
    assert endpoint is not None
    assert endpoint.paused
    assert endpoint.disabled_reason is not None
    assert "410" in endpoint.disabled_reason
    assert "endpoint.disable" in actions
    held = add(engine, {**EVENT, "event": "user.updated"})
    result = drain(engine)
    assert result.snoozed == 1
    assert row(engine, held).status == "queued"
    assert row(engine, held).attempts == 0
    assert len(receiver.seen) == 1


def test_3xx_is_dead_and_not_followed(engine: sa.Engine, receiver: Receiver) -> None:
    endpoint_at(engine, receiver, "/301")
    job_id = add(engine)
    drain(engine)
    job = row(engine, job_id)
    assert job.status == "dead"
    assert "redirect to 'http://127.0.0.1:1/elsewhere' not followed" in job.last_error
    assert len(receiver.seen) == 1


def test_400_is_dead_with_a_masked_excerpt(engine: sa.Engine, receiver: Receiver) -> None:
    endpoint_at(engine, receiver, "/400")
    job_id = add(engine)
    drain(engine)
    job = row(engine, job_id)
    assert job.status == "dead"
    assert job.attempts == 1
    assert "field user_id missing" in job.last_error
    [logged] = deliveries(engine, job_id)
    assert logged["outcome"] == "rejected"
    assert "abc123secret" not in logged["response_excerpt"]
    assert "abc123secret" not in job.last_error


def test_a_hostile_400_body_fails_the_delivery_in_milliseconds(
    engine: sa.Engine, receiver: Receiver
) -> None:
    """Issue 23 #1: 64 KiB of `" " + "secret" * 10900` made masking backtrack for ~23 s
    per excerpt, holding the GIL. The body is cut before it is scanned."""
    endpoint_at(engine, receiver, "/hostile")
    job_id = add(engine)
    started = time.monotonic()
    drain(engine)
    elapsed = time.monotonic() - started
    job = row(engine, job_id)
    assert job.status == "dead"
    assert "answered HTTP 400" in job.last_error
    assert "secretsecret" in job.last_error  # an excerpt, not a masked or empty text
    assert len(job.last_error) < 4200
    [logged] = deliveries(engine, job_id)
    assert logged["outcome"] == "rejected"
    assert len(logged["response_excerpt"]) < 2100
    assert elapsed < 10, f"the delivery took {elapsed:.1f} s"


def test_huge_response_body_is_read_capped(engine: sa.Engine, receiver: Receiver) -> None:
    endpoint_at(engine, receiver, "/big")
    job_id = add(engine)
    drain(engine)
    assert row(engine, job_id).status == "succeeded"
    [logged] = deliveries(engine, job_id)
    assert "truncated" in logged["response_excerpt"]
    assert len(logged["response_excerpt"]) < 3000


def test_reset_after_apply_is_unknown_and_retried_with_the_same_id(
    engine: sa.Engine, receiver: Receiver
) -> None:
    endpoint_at(engine, receiver, "/reset")
    job_id = add(engine)
    drain(engine)
    job = row(engine, job_id)
    assert job.status == "failed"
    assert "outcome unknown" in job.last_error
    drain(engine, now=later(engine, hours=1))
    assert row(engine, job_id).status == "succeeded"
    first, second = receiver.seen
    assert first.webhook_id == second.webhook_id
    assert first.verified
    assert second.verified
    assert receiver.applied[first.webhook_id] == 1
    assert receiver.deliveries[first.webhook_id] == 2
    assert [d["outcome"] for d in deliveries(engine, job_id)] == ["unknown", "delivered"]


def test_timeout_and_connection_refused_retry(engine: sa.Engine, receiver: Receiver) -> None:
    endpoint_at(engine, receiver, "/slow", name="slow")
    add_test_endpoint(engine, "down", f"http://127.0.0.1:{free_port()}/hook")
    slow = add(engine, {**EVENT, "endpoint": "slow"})
    down = add(engine, {**EVENT, "endpoint": "down"})
    drain(engine)
    assert row(engine, slow).status == "failed"
    assert deliveries(engine, slow)[0]["outcome"] == "timeout"
    assert "TimeoutError: no answer within " in row(engine, slow).last_error
    assert row(engine, down).status == "failed"
    assert deliveries(engine, down)[0]["outcome"] == "connect_error"


def test_unknown_endpoint_and_bad_payload_are_dead(engine: sa.Engine) -> None:
    missing = add(engine, {**EVENT, "endpoint": "nope"})
    with pytest.raises(ValidationError, match=r"payload\.event"):
        add(engine, {"endpoint": "crm"})
    # A row written by plain SQL skips enqueue's checks; the handler refuses it too.
    with engine.begin() as conn:
        bad = make_job(
            conn, job_type="webhook.deliver", queue="webhooks", payload={"endpoint": "crm"}
        )
    drain(engine)
    assert "unknown webhook endpoint 'nope'" in row(engine, missing).last_error
    assert "payload.event" in row(engine, bad).last_error


def test_private_target_is_refused_at_save_and_at_delivery(
    engine: sa.Engine, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    for url in (
        "file:///etc/passwd",
        "http://user:pass@example.com/",
        "http://127.0.0.1/",
        "http://2130706433/",
        "http://localhost/",
    ):
        with engine.begin() as conn, pytest.raises(ValidationError, match="url"):
            add_endpoint(conn, "evil", url, allow_private=False, now=db_now(conn))
    # Saved while local targets were allowed; delivery re-checks with the setting off.
    endpoint_at(engine, receiver, "/ok")
    monkeypatch.setenv("JOBDESK_ALLOW_PRIVATE_WEBHOOK_TARGETS", "0")
    job_id = add(engine)
    drain(engine)
    job = row(engine, job_id)
    assert job.status == "dead"
    assert "unsafe URL" in job.last_error
    assert receiver.seen == []
    assert deliveries(engine, job_id)[0]["outcome"] == "blocked"


def test_pause_holds_jobs_without_attempts_and_resume_releases_them(
    engine: sa.Engine, receiver: Receiver
) -> None:
    endpoint_at(engine, receiver, "/ok")
    with engine.begin() as conn:
        pause_endpoint(conn, "crm", actor="ops", reason="CRM maintenance", now=db_now(conn))
    job_id = add(engine)
    assert drain(engine).snoozed == 1
    held = row(engine, job_id)
    assert (held.status, held.attempts) == ("queued", 0)
    assert held.next_run_at > later(engine, seconds=30)
    with engine.begin() as conn:
        assert resume_endpoint(conn, "crm", actor="ops", now=db_now(conn)) == 1
    assert drain(engine).succeeded == 1
    assert row(engine, job_id).attempts == 1
    with engine.connect() as conn:
        actions = conn.execute(sa.select(audit_log.c.action).order_by(audit_log.c.id))
        assert [a for a in actions.scalars() if a != "endpoint.add"] == [
            "endpoint.pause",
            "endpoint.resume",
        ]


def test_failing_endpoint_opens_its_breaker_and_jobs_wait(
    engine: sa.Engine, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBDESK_BREAKER_THRESHOLD", "2")
    endpoint_at(engine, receiver, "/500")
    ids = [add(engine, {**EVENT, "event": f"e{i}"}) for i in range(3)]
    result = drain(engine)
    assert result.failed == 2
    assert result.snoozed == 1
    assert row(engine, ids[2]).attempts == 0
    assert len(receiver.seen) == 2


def test_rotation_signs_with_both_secrets_during_the_overlap(
    engine: sa.Engine, receiver: Receiver
) -> None:
    old = add_test_endpoint(engine, "crm", receiver.url("/ok"))
    with engine.begin() as conn:
        new = rotate_secret(conn, "crm", now=db_now(conn))
    assert new != old
    receiver.secrets[:] = [old]  # a receiver that has not switched yet
    add(engine, {**EVENT, "event": "a"})
    drain(engine)
    receiver.secrets[:] = [new]  # one that has
    add(engine, {**EVENT, "event": "b"})
    drain(engine)
    assert [s.verified for s in receiver.seen] == [True, True]
    assert len(receiver.seen[0].signature.split(" ")) == 2
    with engine.begin() as conn:
        rotate_secret(conn, "crm", overlap=timedelta(0), now=db_now(conn))
        latest = conn.execute(sa.select(webhook_endpoints.c.secret)).scalar_one()
    receiver.secrets[:] = [latest]
    add(engine, {**EVENT, "event": "c"})
    drain(engine)
    assert len(receiver.seen[2].signature.split(" ")) == 1


def test_requeued_dead_job_keeps_its_webhook_id(engine: sa.Engine, receiver: Receiver) -> None:
    endpoint_at(engine, receiver, "/400")
    dead = add(engine)
    drain(engine)
    assert row(engine, dead).status == "dead"
    with engine.begin() as conn:
        conn.execute(sa.update(webhook_endpoints).values(url=receiver.url("/ok")))
        requeued = conn.execute(
            sa.insert(jobs)
            .values(
                job_type="webhook.deliver", queue="webhooks", payload=EVENT, retried_from_id=dead
            )
            .returning(jobs.c.id)
        ).scalar_one()
    drain(engine)
    assert row(engine, requeued).status == "succeeded"
    first, second = receiver.seen
    assert first.webhook_id == second.webhook_id


def test_a_requeued_copy_of_a_delivered_event_is_not_sent_again(
    engine: sa.Engine, receiver: Receiver
) -> None:
    endpoint_at(engine, receiver, "/ok")
    delivered = add(engine)
    drain(engine)
    assert row(engine, delivered).status == "succeeded"
    with engine.begin() as conn:
        copy = conn.execute(
            sa.insert(jobs)
            .values(
                job_type="webhook.deliver",
                queue="webhooks",
                payload=EVENT,
                retried_from_id=delivered,
            )
            .returning(jobs.c.id)
        ).scalar_one()
    drain(engine)
    # the copy's event is the original's: found under the original's effect key
    assert row(engine, copy).result["skipped"] == "already delivered"
    assert len(receiver.seen) == 1


def test_kill_between_delivery_and_completion_applies_once(
    engine: sa.Engine, receiver: Receiver
) -> None:
    endpoint_at(engine, receiver, "/ok")
    job_id = add(engine)
    with engine.begin() as conn:
        [claimed] = claim(conn, worker_id="doomed", limit=1, lease_seconds=5)
    ctx = JobContext(
        job_id=claimed.id,
        job_type="webhook.deliver",
        attempt=claimed.attempt,
        max_attempts=claimed.max_attempts,
        idempotency_key=claimed.idempotency_key,
        engine=engine,
    )
    on_one_loop(lambda: deliver_webhook(claimed.payload, ctx))  # the receiver applied it ...
    # ... and the worker died before its last transaction (delivery row + effect record)
    # committed: that transaction is gone, the job is still running under a dead lease.
    with engine.begin() as conn:
        conn.execute(sa.delete(effects))
        conn.execute(sa.delete(webhook_deliveries))
    expired = later(engine, seconds=30)
    with engine.begin() as conn:
        assert rescue_expired(conn, now=expired, policy_for=registry.policy_for)
    drain(engine, now=later(engine, hours=1))
    assert row(engine, job_id).status == "succeeded"
    first, second = receiver.seen
    assert first.webhook_id == second.webhook_id
    assert receiver.applied[first.webhook_id] == 1
    # And once recorded, a further re-run sends nothing.
    due = later(engine)
    with engine.begin() as conn:
        conn.execute(
            sa.update(jobs)
            .where(jobs.c.id == job_id)
            .values(status="queued", attempts=1, next_run_at=due)
        )
    drain(engine)
    assert len(receiver.seen) == 2
    assert row(engine, job_id).result["skipped"] == "already delivered"


def effect_rows(engine: sa.Engine) -> list[tuple[str, int | None]]:
    with engine.connect() as conn:
        return [
            (r.state, r.job_id) for r in conn.execute(sa.select(effects.c.state, effects.c.job_id))
        ]


@pytest.mark.parametrize(
    ("path", "kept"),
    [
        ("/400", False),  # answered "no": certainly not delivered
        ("/500", False),
        ("/429", False),
        ("/slow", True),  # timed out after sending: it may have been applied
        ("/reset", True),  # the connection broke after sending
    ],
)
def test_the_reservation_is_kept_only_when_the_event_may_have_been_delivered(
    engine: sa.Engine, receiver: Receiver, path: str, kept: bool
) -> None:
    endpoint_at(engine, receiver, path)
    job_id = add(engine)
    drain(engine, max_jobs=1)
    assert len(receiver.seen) == 1
    assert effect_rows(engine) == ([("reserved", job_id)] if kept else [])


def test_nothing_sent_gives_the_reservation_back(engine: sa.Engine, receiver: Receiver) -> None:
    receiver.secrets.append(add_test_endpoint(engine, "crm", f"http://127.0.0.1:{free_port()}/x"))
    add(engine)  # nobody listens there: connection refused
    drain(engine, max_jobs=1)
    endpoint_at(engine, receiver, "/ok", name="paused")
    with engine.begin() as conn:
        pause_endpoint(conn, "paused", actor="ops", reason="maintenance", now=db_now(conn))
    add(engine, {**EVENT, "endpoint": "paused"})
    drain(engine, max_jobs=1)
    assert receiver.seen == []
    assert effect_rows(engine) == []


def test_a_retry_takes_over_its_own_kept_reservation(engine: sa.Engine, receiver: Receiver) -> None:
    endpoint_at(engine, receiver, "/reset")  # applies, then loses the answer; later 200
    job_id = add(engine)
    drain(engine, max_jobs=1)
    drain(engine, now=later(engine, hours=1))
    assert row(engine, job_id).status == "succeeded"
    first, second = receiver.seen
    assert first.webhook_id == second.webhook_id  # the one repeat carries the same id
    assert receiver.applied[first.webhook_id] == 1
    assert effect_rows(engine) == [("done", job_id)]
