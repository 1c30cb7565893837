"""Enqueue joins the caller's transaction on both databases (D8)."""

import sqlalchemy as sa

from jobdesk import enqueue
from jobdesk.shared.core.models import jobs


def count_jobs(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar_one())


def test_rolled_back_enqueue_is_never_visible(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        enqueue(conn, "email.send", {"template": "welcome", "to_user_id": 1, "user_id": 1})
        conn.rollback()
    assert count_jobs(engine) == 0


def test_committed_enqueue_is_visible_with_type_defaults(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        job_id = enqueue(
            conn,
            "email.send",
            {"template": "welcome", "to_user_id": 1, "user_id": 1},
            idempotency_key="welcome:1",
        )
    with engine.connect() as conn:
        row = conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).one()
    assert (row.status, row.queue, row.attempts) == ("queued", "email", 0)
    assert row.payload == {"template": "welcome", "to_user_id": 1, "user_id": 1}
    assert row.next_run_at.tzinfo is not None


def test_duplicate_idempotency_key_returns_the_existing_id(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        first = enqueue(
            conn,
            "email.send",
            {"template": "welcome", "to_user_id": 1, "user_id": 1},
            idempotency_key="welcome:1",
        )
    with engine.begin() as conn:
        second = enqueue(
            conn,
            "email.send",
            {"template": "welcome", "to_user_id": 1, "user_id": 1},
            idempotency_key="welcome:1",
        )
    assert first == second
    assert count_jobs(engine) == 1


def test_enqueue_into_a_database_without_jobdesk_says_to_migrate(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import pytest
    import sqlalchemy as sa

    from jobdesk import SchemaMissingError

    engine = sa.create_engine(f"sqlite:///{tmp_path / 'app.db'}")
    with (
        pytest.raises(SchemaMissingError, match="run `jobdesk migrate`") as caught,
        engine.begin() as conn,
    ):
        enqueue(conn, "email.send", {"to": "ana@example.com", "template": "welcome"})
    assert "jobdesk_jobs" in str(caught.value)
    engine.dispose()
