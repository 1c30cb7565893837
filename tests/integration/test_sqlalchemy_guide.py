"""Guide: enqueue from plain SQLAlchemy, in the same transaction as your own write.

With a Connection::

    with engine.begin() as conn:
        user_id = conn.execute(insert(users).values(...).returning(users.c.id)).scalar_one()
        enqueue(conn, "email.send", {"to_user_id": user_id, "template": "welcome"},
                idempotency_key=f"welcome_email:user:{user_id}")

With an ORM Session::

    with Session(engine) as session, session.begin():
        session.add(user)
        session.flush()                       # the user's id
        enqueue(session, "email.send", {...}, idempotency_key=...)

Commit → the job exists and a worker can claim it; roll back → neither exists.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session

from jobdesk import enqueue
from tests.integration.appdb import (
    app_tables,
    claim_all,
    jobs_with_key,
    signup_count,
    signups,
)


class Base(DeclarativeBase):
    pass


class Signup(Base):
    __table__ = signups
    id: Mapped[int]
    email: Mapped[str]


class Boom(Exception):
    pass


def test_connection_commit_makes_the_job_claimable(engine: sa.Engine) -> None:
    with app_tables(engine):
        with engine.begin() as conn:
            user_id = conn.execute(
                sa.insert(signups).values(email="ana@example.com").returning(signups.c.id)
            ).scalar_one()
            job_id = enqueue(
                conn,
                "email.send",
                {"to_user_id": user_id, "template": "welcome"},
                idempotency_key=f"welcome_email:user:{user_id}",
            )
        assert signup_count(engine) == 1
        assert jobs_with_key(engine, f"welcome_email:user:{user_id}") == [job_id]
        assert claim_all(engine) == [job_id]


def test_connection_rollback_leaves_neither_row(engine: sa.Engine) -> None:
    with app_tables(engine):

        def sign_up() -> None:
            with engine.begin() as conn:
                conn.execute(sa.insert(signups).values(email="ana@example.com"))
                enqueue(
                    conn,
                    "email.send",
                    {"template": "welcome", "to": "ana@example.com"},
                    idempotency_key="it:rb",
                )
                raise Boom  # anything failing after the enqueue

        with pytest.raises(Boom):
            sign_up()
        assert signup_count(engine) == 0
        assert jobs_with_key(engine, "it:rb") == []
        assert claim_all(engine) == []


def test_session_commit_makes_the_job_claimable(engine: sa.Engine) -> None:
    with app_tables(engine):
        with Session(engine) as session, session.begin():
            user = Signup(email="ben@example.com")
            session.add(user)
            session.flush()
            job_id = enqueue(
                session,
                "webhook.deliver",
                {"endpoint": "crm", "event": "user.created", "data_ref": {"user_id": user.id}},
                idempotency_key=f"webhook:user:{user.id}:event:user.created",
            )
        assert signup_count(engine) == 1
        assert claim_all(engine) == [job_id]


def test_session_rollback_leaves_neither_row(engine: sa.Engine) -> None:
    with app_tables(engine):
        with Session(engine) as session:
            session.add(Signup(email="ben@example.com"))
            session.flush()
            enqueue(
                session,
                "email.send",
                {"template": "welcome", "to": "ben@example.com"},
                idempotency_key="it:s-rb",
            )
            session.rollback()
        assert signup_count(engine) == 0
        assert jobs_with_key(engine, "it:s-rb") == []
        assert claim_all(engine) == []


def test_a_job_is_not_claimable_before_its_transaction_commits(engine: sa.Engine) -> None:
    """D8: a late commit — a worker looking meanwhile sees nothing."""
    with app_tables(engine), Session(engine) as session:
        session.add(Signup(email="eva@example.com"))
        session.flush()
        job_id = enqueue(session, "email.send", {"template": "welcome", "to": "eva@example.com"})
        if engine.dialect.name == "postgresql":
            # Another connection (a worker) while the app's transaction is open.
            assert claim_all(engine) == []
        session.commit()
        assert claim_all(engine) == [job_id]
