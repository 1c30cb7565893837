"""Job type of the exactly-once test: an effect written to the same database through
`ctx.once(key, fn(conn))`.

`test_once_db_applied` has no unique key on purpose: an effect applied twice is two rows
for one key, not an error that would hide it.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from jobdesk import job
from jobdesk.shared.core.retry import ExponentialBackoff
from jobdesk.worker.context import JobContext

FAST = ExponentialBackoff(base=timedelta(seconds=0.1), cap=timedelta(seconds=0.5))

metadata = sa.MetaData()
applied = sa.Table(
    "test_once_db_applied",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("key", sa.String(100), nullable=False, index=True),
    sa.Column("job_id", sa.BigInteger, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
)


@job("t.once_db", backoff=FAST, max_attempts=50)
def once_db(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Sleeps a little on both sides of the effect, so kills land before it, inside its
    transaction and between its commit and the job's completion."""
    pause = float(payload.get("ms", 0)) / 1000.0
    time.sleep(pause)
    key = str(payload["key"])

    def apply(conn: sa.Connection) -> dict[str, Any]:
        conn.execute(sa.insert(applied).values(key=key, job_id=ctx.job_id, attempt=ctx.attempt))
        time.sleep(pause / 2)
        return {"attempt": ctx.attempt}

    detail = ctx.once(f"once-db:{key}", apply)
    time.sleep(pause)
    return detail
