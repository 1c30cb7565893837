"""Enqueue: joins the caller's transaction (D8), idempotency (G5), batches, plain SQL, NOTIFY."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from jobdesk import NewJob, enqueue, enqueue_many
from jobdesk.shared.core.claim import claim
from jobdesk.shared.core.db import make_engine
from jobdesk.shared.core.enqueue_sql import NOTIFY_CHANNEL
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.states import JobStatus
from jobdesk.shared.core.transitions import complete, fail
from tests.factories import job_row, make_job

README_SQL = """
INSERT INTO jobdesk_jobs (job_type, queue, payload, idempotency_key)
VALUES ('email.send', 'email', '{"to": "ana@example.com", "template": "welcome"}',
        'welcome_email:user:42')
ON CONFLICT (idempotency_key) WHERE retried_from_id IS NULL AND idempotency_key IS NOT NULL
  DO NOTHING
"""


def count_jobs(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar_one())


def claim_all(engine: sa.Engine, **kwargs: object) -> list[int]:
    with engine.begin() as conn:
        return [job.id for job in claim(conn, worker_id="w1", limit=100, **kwargs)]  # type: ignore[arg-type]


# -- D8: the job commits or rolls back with the caller's transaction ----------------------


@pytest.fixture
def app_users(engine: sa.Engine) -> Iterator[sa.Table]:
    """An application table of the app that enqueues (dropped again afterwards)."""
    table = sa.Table(
        "app_users",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("email", sa.Text),
    )
    table.create(engine)
    yield table
    table.drop(engine)


def count_users(engine: sa.Engine, table: sa.Table) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())


@pytest.mark.usefixtures("app_users")
def test_job_commits_with_the_callers_own_row(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO app_users VALUES (42, 'ana@example.com')"))
        job_id = enqueue(conn, "email.send", {"to_user_id": 42, "template": "welcome"})
    assert claim_all(engine) == [job_id]


def test_rolled_back_transaction_leaves_neither_row_nor_job(
    engine: sa.Engine, app_users: sa.Table
) -> None:
    with engine.connect() as conn:
        conn.execute(sa.text("INSERT INTO app_users VALUES (42, 'ana@example.com')"))
        enqueue(conn, "email.send", {"template": "welcome", "to_user_id": 42})
        conn.rollback()
    assert count_jobs(engine) == 0
    assert count_users(engine, app_users) == 0
    assert claim_all(engine) == []


def test_session_commit_and_rollback(engine: sa.Engine) -> None:
    with Session(engine) as session, session.begin():
        kept = enqueue(
            session, "email.send", {"template": "welcome", "to_user_id": 1, "user_id": 1}
        )
    with Session(engine) as session:
        enqueue(session, "email.send", {"template": "welcome", "to_user_id": 1, "user_id": 2})
        session.rollback()
    with engine.connect() as conn:
        ids = list(conn.execute(sa.select(jobs.c.id)).scalars())
    assert ids == [kept]


def test_exception_inside_the_transaction_rolls_the_job_back(engine: sa.Engine) -> None:
    def signup() -> None:
        with engine.begin() as conn:
            enqueue(conn, "email.send", {"template": "welcome", "to_user_id": 1, "user_id": 1})
            raise RuntimeError("app failed after enqueue")

    with pytest.raises(RuntimeError):
        signup()
    assert count_jobs(engine) == 0


@pytest.mark.postgresql_only
def test_late_commit_makes_the_job_claimable_only_after_commit(engine: sa.Engine) -> None:
    with engine.connect() as app:
        job_id = enqueue(app, "email.send", {"template": "welcome", "to_user_id": 1, "user_id": 1})
        assert claim_all(engine) == []  # another connection cannot see it yet
        app.commit()
    assert claim_all(engine) == [job_id]


@pytest.mark.sqlite_only
def test_late_commit_is_invisible_to_readers_until_commit(engine: sa.Engine, db_url: str) -> None:
    # On SQLite the enqueuing transaction holds the write lock, so a claim would wait
    # for it; a reader (WAL snapshot) shows the job is not visible before the commit.
    reader = make_engine(db_url, sqlite_begin="DEFERRED")
    try:
        with engine.connect() as app:
            job_id = enqueue(
                app, "email.send", {"template": "welcome", "to_user_id": 1, "user_id": 1}
            )
            assert count_jobs(reader) == 0
            app.commit()
        assert count_jobs(reader) == 1
        assert claim_all(engine) == [job_id]
    finally:
        reader.dispose()


def test_an_engine_is_refused_because_it_has_no_transaction_to_join(engine: sa.Engine) -> None:
    with pytest.raises(TypeError, match="Connection or Session"):
        enqueue(engine, "email.send", {"template": "welcome", "to_user_id": 1})  # type: ignore[arg-type]


def test_defaults_come_from_the_job_type_and_options_override_them(engine: sa.Engine) -> None:
    run_at = datetime.now(UTC) + timedelta(hours=1)
    with engine.begin() as conn:
        default_id = enqueue(conn, "email.send", {"template": "welcome", "to_user_id": 1, "a": 1})
        custom_id = enqueue(
            conn,
            "email.send",
            {"template": "welcome", "to_user_id": 1, "a": 2},
            queue="urgent",
            priority=0,
            max_attempts=2,
            run_at=run_at,
            group_key="user:1",
            timeout=2.5,
        )
        plain_id = enqueue(conn, "custom.thing", {})
        default, custom, plain = (job_row(conn, i) for i in (default_id, custom_id, plain_id))
    assert (default.queue, default.priority, default.max_attempts) == ("email", 3, 6)
    assert default.timeout_seconds == 20
    assert (custom.queue, custom.priority, custom.max_attempts) == ("urgent", 0, 2)
    assert custom.next_run_at == run_at
    assert (custom.group_key, custom.timeout_seconds) == ("user:1", 2.5)
    assert (plain.queue, plain.priority, plain.max_attempts) == ("default", 5, 5)
    assert plain.timeout_seconds is None
    assert plain.created_at <= plain.next_run_at <= datetime.now(UTC) + timedelta(seconds=5)


def test_payload_round_trips_exactly(engine: sa.Engine) -> None:
    payload = {
        "text": 'naïve café ✓ 😀 "quoted" back\\slash\nnew line',
        "big": 2**62,
        "float": 0.1,
        "nested": {"list": [1, None, True, {"k": "v"}]},
        "tuple": (1, 2),
        "empty": {},
    }
    with engine.begin() as conn:
        job_id = enqueue(conn, "test.echo", payload)
        stored = job_row(conn, job_id).payload
    assert stored == json.loads(json.dumps(payload))


def test_run_at_with_an_offset_is_stored_as_the_same_instant_in_utc(engine: sa.Engine) -> None:
    when = datetime.now(timezone(timedelta(hours=5, minutes=30))) + timedelta(days=1)
    with engine.begin() as conn:
        job_id = enqueue(conn, "test.echo", {}, run_at=when)
        stored = job_row(conn, job_id).next_run_at
    assert stored == when
    assert stored.utcoffset() == timedelta(0)


# -- G5: idempotency keys -----------------------------------------------------------------


def test_duplicate_key_in_the_same_transaction_returns_the_same_id(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        first = enqueue(
            conn,
            "email.send",
            {"template": "welcome", "to_user_id": 1, "n": 1},
            idempotency_key="k",
        )
        second = enqueue(
            conn,
            "email.send",
            {"template": "welcome", "to_user_id": 1, "n": 2},
            idempotency_key="k",
        )
        assert first == second
        assert job_row(conn, first).payload == {"template": "welcome", "to_user_id": 1, "n": 1}
    assert count_jobs(engine) == 1


def test_key_stays_taken_after_success_and_after_dead(engine: sa.Engine) -> None:
    now = datetime.now(UTC)
    with engine.begin() as conn:
        done_id = enqueue(
            conn, "email.send", {"template": "welcome", "to_user_id": 1}, idempotency_key="done"
        )
        dead_id = enqueue(
            conn,
            "email.send",
            {"template": "welcome", "to_user_id": 1},
            idempotency_key="dead",
            max_attempts=1,
        )
    with engine.begin() as conn:
        claimed = {job.id: job for job in claim(conn, worker_id="w", limit=10)}
    with engine.begin() as conn:
        assert complete(conn, claimed[done_id].ref, now=now)
        assert fail(conn, claimed[dead_id].ref, error="boom", retry_at=None, now=now)
    with engine.begin() as conn:
        assert job_row(conn, done_id).status == JobStatus.SUCCEEDED
        assert job_row(conn, dead_id).status == JobStatus.DEAD
        assert (
            enqueue(
                conn, "email.send", {"template": "welcome", "to_user_id": 1}, idempotency_key="done"
            )
            == done_id
        )
        assert (
            enqueue(
                conn, "email.send", {"template": "welcome", "to_user_id": 1}, idempotency_key="dead"
            )
            == dead_id
        )
    assert count_jobs(engine) == 2


def test_a_retry_copy_of_a_dead_job_does_not_take_the_key(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        dead_id = make_job(conn, status="dead", idempotency_key="k", attempts=1)
        retry_id = make_job(conn, idempotency_key="k", retried_from_id=dead_id)
        assert enqueue(conn, "test.noop", {}, idempotency_key="k") == dead_id
        assert retry_id != dead_id


def test_key_is_free_again_once_its_job_is_pruned(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        old = enqueue(
            conn, "email.send", {"template": "welcome", "to_user_id": 1}, idempotency_key="k"
        )
        conn.execute(sa.delete(jobs).where(jobs.c.id == old))
        new = enqueue(
            conn, "email.send", {"template": "welcome", "to_user_id": 1}, idempotency_key="k"
        )
    assert new != old
    assert count_jobs(engine) == 1


# -- enqueue_many -------------------------------------------------------------------------


def test_enqueue_many_returns_ids_in_input_order(engine: sa.Engine) -> None:
    specs = [NewJob("test.echo", {"n": n}, priority=n % 10) for n in range(1200)]
    with engine.begin() as conn:
        ids = enqueue_many(conn, specs)
        rows = {r.id: r.payload for r in conn.execute(sa.select(jobs.c.id, jobs.c.payload))}
    assert len(ids) == len(set(ids)) == 1200
    assert [rows[i]["n"] for i in ids] == list(range(1200))


def test_enqueue_many_mixes_keyed_unkeyed_existing_and_repeated_keys(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        existing = enqueue(conn, "test.echo", {"n": "existing"}, idempotency_key="old")
    items: list[NewJob | dict[str, object]] = [
        NewJob("test.echo", {"n": 0}),
        {"job_type": "test.echo", "payload": {"n": 1}, "idempotency_key": "a"},
        NewJob("test.echo", {"n": 2}, idempotency_key="old"),
        NewJob("test.echo", {"n": 3}),
        NewJob("test.echo", {"n": 4}, idempotency_key="a"),
        NewJob("test.echo", {"n": 5}, idempotency_key="b", queue="other"),
    ]
    with engine.begin() as conn:
        ids = enqueue_many(conn, items)  # type: ignore[arg-type]
        payloads = {r.id: r.payload for r in conn.execute(sa.select(jobs.c.id, jobs.c.payload))}
    assert ids[2] == existing
    assert ids[1] == ids[4]
    assert len(set(ids)) == 5
    assert [payloads[i]["n"] for i in ids] == [0, 1, "existing", 3, 1, 5]
    assert count_jobs(engine) == 5


def test_enqueue_many_of_nothing_writes_nothing(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        assert enqueue_many(conn, []) == []
        assert enqueue_many(conn, iter(())) == []
    assert count_jobs(engine) == 0


def test_enqueue_many_accepts_a_generator(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        ids = enqueue_many(conn, (NewJob("test.echo", {"n": n}) for n in range(3)))
    assert len(ids) == 3


# -- the documented plain-SQL insert ------------------------------------------------------


def test_readme_plain_sql_insert_is_claimable_with_defaults(engine: sa.Engine, db_url: str) -> None:
    url = sa.make_url(db_url)
    if url.get_backend_name() == "sqlite":
        raw = sqlite3.connect(str(url.database), isolation_level=None)
        try:
            for _ in range(2):  # the second insert is a no-op thanks to ON CONFLICT
                raw.execute("BEGIN IMMEDIATE")
                raw.execute(README_SQL)
                raw.execute("COMMIT")
        finally:
            raw.close()
    else:
        dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(dsn) as raw:
            for _ in range(2):
                with raw.transaction():
                    raw.execute(README_SQL)
                    raw.execute("SELECT pg_notify('jobdesk_jobs', 'email')")
    assert count_jobs(engine) == 1
    with engine.begin() as conn:
        (job,) = claim(conn, worker_id="w1", limit=5, queues=["email"])
        row = job_row(conn, job.id)
    assert job.payload == {"to": "ana@example.com", "template": "welcome"}
    assert (job.job_type, job.queue, job.attempt, job.max_attempts) == ("email.send", "email", 1, 5)
    assert (row.priority, row.idempotency_key, row.status) == (
        5,
        "welcome_email:user:42",
        "running",
    )
    assert row.created_at is not None
    assert row.next_run_at.tzinfo is not None
    with engine.begin() as conn:
        assert (
            enqueue(
                conn,
                "email.send",
                {"template": "welcome", "to_user_id": 1},
                idempotency_key="welcome_email:user:42",
            )
            == job.id
        )


# -- NOTIFY -------------------------------------------------------------------------------


def listener(db_url: str) -> psycopg.Connection:  # type: ignore[type-arg]
    dsn = sa.make_url(db_url).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
    return conn


@pytest.mark.postgresql_only
def test_notify_is_delivered_on_commit_and_not_on_rollback(engine: sa.Engine, db_url: str) -> None:
    with listener(db_url) as listen:
        with engine.connect() as conn:
            enqueue(conn, "email.send", {"template": "welcome", "to_user_id": 1})
            conn.rollback()
        assert list(listen.notifies(timeout=0.3)) == []
        with engine.connect() as conn:
            enqueue(conn, "email.send", {"template": "welcome", "to_user_id": 1})
            assert list(listen.notifies(timeout=0.2)) == []  # not before the commit
            enqueue_many(conn, [NewJob("a.b", {}, queue="q2"), NewJob("a.c", {}, queue="q2")])
            conn.commit()
        got = [n.payload for n in listen.notifies(timeout=2, stop_after=2)]
    assert sorted(got) == ["email", "q2"]
