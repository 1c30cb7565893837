"""The sync `enqueue` works on every SQLAlchemy PostgreSQL driver an app may already
use, not only psycopg 3: its SQL is SQLAlchemy bound parameters, never one driver's
placeholder text."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from jobdesk import NewJob, enqueue, enqueue_many
from jobdesk.shared.core.models import jobs

pytestmark = pytest.mark.postgresql_only


@pytest.fixture(params=["psycopg2", "pg8000"])
def app_engine(
    request: pytest.FixtureRequest, pg_url: str, engine: sa.Engine
) -> Iterator[sa.Engine]:
    module = "psycopg2" if request.param == "psycopg2" else "pg8000"
    pytest.importorskip(module)
    url = sa.make_url(pg_url).set(drivername=f"postgresql+{request.param}")
    app = sa.create_engine(url)
    yield app
    app.dispose()


def test_enqueue_and_its_key_on_another_driver(app_engine: sa.Engine, engine: sa.Engine) -> None:
    with app_engine.begin() as conn:
        one = enqueue(conn, "t.any", {"n": 1}, idempotency_key="k", queue="q1")
        again = enqueue(conn, "t.other", {}, idempotency_key="k")
        many = enqueue_many(conn, [NewJob("t.any", {"n": n}) for n in (2, 3)])
    assert again == one
    with engine.connect() as conn:
        found = list(
            conn.execute(sa.select(jobs.c.id, jobs.c.queue, jobs.c.payload).order_by(jobs.c.id))
        )
    assert [tuple(row) for row in found] == [
        (one, "q1", {"n": 1}),
        (many[0], "default", {"n": 2}),
        (many[1], "default", {"n": 3}),
    ]
