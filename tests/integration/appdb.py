"""What every integration guide test needs: the app's own table next to Jobdesk's, and
the two questions each guide answers — did the job commit with the app's row, and can
a worker claim it?"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from jobdesk.shared.core.claim import claim
from jobdesk.shared.core.models import jobs

app_metadata = sa.MetaData()

#: The app's own table (a sign-up), created beside Jobdesk's tables for each test.
signups = sa.Table(
    "it_signups",
    app_metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("email", sa.String(254), nullable=False, unique=True),
)


@contextmanager
def app_tables(engine: sa.Engine) -> Iterator[None]:
    app_metadata.create_all(engine)
    try:
        yield
    finally:
        app_metadata.drop_all(engine)


def signup_count(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(signups)).scalar_one())


def jobs_with_key(engine: sa.Engine, key: str) -> list[int]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(jobs.c.id).where(jobs.c.idempotency_key == key))
        return [row.id for row in rows]


def claim_all(engine: sa.Engine) -> list[int]:
    """Ids a worker can claim right now (claims them)."""
    with engine.begin() as conn:
        return [job.id for job in claim(conn, worker_id="integration-test", limit=50)]
