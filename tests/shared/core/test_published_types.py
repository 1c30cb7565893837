"""Defaults workers published, as `enqueue` sees them in a process that never imported
the job module: used for unregistered types, cached per process for a TTL, explicit
options first; types nobody declared get the fallback defaults or are refused."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import NewJob, ValidationError, enqueue, enqueue_many
from jobdesk.shared.core import job_types
from jobdesk.shared.core.job_types import TypeDefaults, known_types
from jobdesk.shared.core.models import jobs, published_job_types
from jobdesk.shared.core.published_types import (
    list_published,
    publish_defaults,
    published_defaults,
)

TYPE = "t.published"
SLOW = TypeDefaults(queue="slow", priority=2, max_attempts=9, timeout_seconds=7.0)


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    published_defaults.clear()
    yield
    published_defaults.clear()


def publish(engine: sa.Engine, defaults: TypeDefaults, worker_id: str = "w1") -> Any:
    with engine.begin() as conn:
        return publish_defaults(conn, {TYPE: defaults}, worker_id=worker_id, now=datetime.now(UTC))


EMAIL = {"to": "ana@example.com", "template": "welcome"}


def add(engine: sa.Engine, job_type: str = TYPE, **options: Any) -> int:
    payload = EMAIL if job_type == "email.send" else {}
    with engine.begin() as conn:
        return enqueue(conn, job_type, payload, **options)


def options_of(engine: sa.Engine, job_id: int) -> tuple[str, int, int, float | None]:
    with engine.connect() as conn:
        row = conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).one()
    return (row.queue, row.priority, row.max_attempts, row.timeout_seconds)


def count_jobs(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar_one())


def type_lookups(engine: sa.Engine) -> list[str]:
    """Records every statement that reads `jobdesk_job_types`."""
    seen: list[str] = []

    @sa.event.listens_for(engine, "before_cursor_execute")
    def record(*args: Any) -> None:
        statement = args[2]
        if "jobdesk_job_types" in statement:
            seen.append(statement)

    return seen


def test_the_type_is_not_registered_in_this_process() -> None:
    assert TYPE not in known_types()


def test_published_defaults_fill_the_options(engine: sa.Engine) -> None:
    publish(engine, SLOW)
    assert options_of(engine, add(engine)) == ("slow", 2, 9, 7.0)
    with engine.begin() as conn:
        ids = enqueue_many(conn, [NewJob(TYPE, {}), {"job_type": TYPE, "payload": {}}])
    assert [options_of(engine, i) for i in ids] == [("slow", 2, 9, 7.0)] * 2


def test_explicit_options_win(engine: sa.Engine) -> None:
    publish(engine, SLOW)
    job_id = add(engine, queue="fast", priority=8, max_attempts=2, timeout=3)
    assert options_of(engine, job_id) == ("fast", 8, 2, 3.0)
    assert options_of(engine, add(engine, max_attempts=4)) == ("slow", 2, 4, 7.0)


def test_locally_registered_defaults_beat_published_ones(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        publish_defaults(conn, {"email.send": SLOW}, worker_id="w-old", now=datetime.now(UTC))
    assert options_of(engine, add(engine, "email.send")) == (
        "email",
        3,
        6,
        20.0,
    )


def test_one_query_per_type_then_the_cache_until_the_ttl(
    engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(published_defaults, "ttl_seconds", 0.5)
    publish(engine, SLOW)
    lookups = type_lookups(engine)
    for _ in range(5):
        assert options_of(engine, add(engine))[0] == "slow"
    assert len(lookups) == 1
    # A worker of another version starts and publishes different defaults: enqueues
    # keep the cached ones until the TTL has passed, then read the new ones once.
    publish(engine, TypeDefaults("fast", 5, 3, None), worker_id="w2")
    lookups.clear()
    assert options_of(engine, add(engine))[0] == "slow"
    time.sleep(0.6)
    assert options_of(engine, add(engine)) == ("fast", 5, 3, None)
    assert options_of(engine, add(engine)) == ("fast", 5, 3, None)
    assert len(lookups) == 1


def test_not_published_is_cached_too(engine: sa.Engine) -> None:
    lookups = type_lookups(engine)
    for _ in range(3):
        add(engine, "t.nobody")
    assert len(lookups) == 1


def test_republishing_replaces_the_row_and_reports_the_difference(engine: sa.Engine) -> None:
    assert publish(engine, SLOW, worker_id="w1") == []
    assert publish(engine, SLOW, worker_id="w2") == []  # same defaults: nothing to report
    changed = publish(engine, TypeDefaults("fast"), worker_id="w3")
    assert [(c.job_type, c.before.defaults, c.before.published_by) for c in changed] == [
        (TYPE, SLOW, "w2")
    ]
    with engine.connect() as conn:
        [row] = list_published(conn)
        assert (row.job_type, row.defaults, row.published_by) == (TYPE, TypeDefaults("fast"), "w3")
        assert (
            conn.execute(sa.select(sa.func.count()).select_from(published_job_types)).scalar_one()
            == 1
        )


# -- a type nobody declared ---------------------------------------------------------------


def test_allow_uses_the_documented_fallback_and_says_so(
    engine: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="jobdesk.enqueue"):
        first = add(engine, "t.undeclared")
        add(engine, "t.undeclared")
    assert options_of(engine, first) == ("default", 5, 5, None)
    warned = [r for r in caplog.records if getattr(r, "action", "") == "enqueue_fallback_defaults"]
    assert len(warned) <= 1  # once per type and process (an earlier test may have warned)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="jobdesk.enqueue"):
        add(engine, f"t.undeclared-{time.monotonic_ns()}")
    [message] = [r.getMessage() for r in caplog.records if "no worker has published" in r.message]
    assert "queue 'default', priority 5, 5 attempts" in message
    assert "JOBDESK_UNKNOWN_TYPES=refuse" in message


def test_refuse_names_the_type_and_writes_nothing(
    engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBDESK_UNKNOWN_TYPES", "refuse")
    # This process may have declared it in another test (`@job(..., target=registry)`
    # also records the type's defaults process-wide); here nobody has.
    monkeypatch.delitem(job_types._registered, "crm.sync", raising=False)
    with pytest.raises(ValidationError) as refused:
        add(engine, "crm.sync")
    assert refused.value.field == "job_type"
    assert refused.value.message == (
        "job type 'crm.sync' is not registered here and no worker has published it: "
        "import its module (JOBDESK_JOB_MODULES) or start a worker that has it"
    )
    with pytest.raises(ValidationError) as batch, engine.begin() as conn:
        enqueue_many(conn, [NewJob("email.send", EMAIL), NewJob("crm.sync", {})])
    assert batch.value.field == "jobs[1].job_type"
    assert count_jobs(engine) == 0
    # Registered and published types are unaffected.
    publish(engine, SLOW)
    assert options_of(engine, add(engine))[0] == "slow"
    assert options_of(engine, add(engine, "email.send"))[0] == "email"


def test_refuse_does_not_trust_a_cached_not_published(
    engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    add(engine)  # "not published" is now cached (allowed, fallback defaults)
    monkeypatch.setenv("JOBDESK_UNKNOWN_TYPES", "refuse")
    publish(engine, SLOW)  # the first worker starts
    assert options_of(engine, add(engine))[0] == "slow"


def test_a_bad_policy_value_is_named(engine: sa.Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBDESK_UNKNOWN_TYPES", "ignore")
    with pytest.raises(Exception, match="JOBDESK_UNKNOWN_TYPES") as bad:
        add(engine, "t.nobody-else")
    assert "refuse" in str(bad.value)
    assert count_jobs(engine) == 0
