"""Settling: the database moves waiting jobs on, in the transaction of the outcome that
lets them go.

When a job becomes final (`succeeded`, `dead`, `cancelled`) and it is a batch child, its
batch's counters grow; the outcome that brings `finished` to `total` releases the
batch's `on_finish` callback, the one that brings `succeeded` to `total` its
`on_success` callback (`waiting` -> `queued`, compare-and-set on `waiting`, so each is
released at most once, ever). When a job succeeds and others were enqueued `after=` it,
their `waiting_for` drops and those at zero are released. A `wait()`er is told
(PostgreSQL: `NOTIFY jobdesk_settled`, payload the job id).

Triggers, not the worker's code, do this: every writer that ends a job — a worker's
batched completion, a failure, the reaper's rescue, an operator's cancel, an app's
plain SQL — settles its waiting jobs without knowing about them, and a rolled-back
outcome releases nothing.

PostgreSQL: one statement-level trigger reads the statement's transition tables (which
`job_counts` captures anyway). A statement with no batch child and no watched job — a
claim, a heartbeat, any plain job's completion — costs one scan of its own rows. Batch
rows and dependents are locked in id order first, so two completions settling the same
batches wait for each other instead of deadlocking; a counter row per batch, updated
once per statement, not per child.

SQLite: row triggers whose WHEN clause lets only batch children and watched jobs in (one
writer at a time, so nothing races); each ending child updates its batch's counters, and
only the counter update that completes the batch releases the callbacks (a trigger on
`jobdesk_batches`).
"""

from __future__ import annotations

import sqlalchemy as sa

from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.driver.settle_triggers import (
    POSTGRESQL_DDL,
    SETTLED_CHANNEL,
    SQLITE_DDL,
)
from jobdesk.shared.core.models import install_after_create

__all__ = ["SETTLED_CHANNEL", "ddl", "drop_ddl"]


def ddl(bind: sa.Connection) -> tuple[str, ...]:
    """The statements that install the settle triggers on this connection's database."""
    return driver(bind).choose(postgresql=POSTGRESQL_DDL, sqlite=SQLITE_DDL)


def drop_ddl(bind: sa.Connection) -> tuple[str, ...]:
    """The statements that remove them (the migration's downgrade)."""
    return driver(bind).choose(
        postgresql=(
            "DROP TRIGGER IF EXISTS jobdesk_settle ON jobdesk_jobs",
            "DROP FUNCTION IF EXISTS jobdesk_settle()",
        ),
        sqlite=(
            "DROP TRIGGER IF EXISTS jobdesk_settle_batch",
            "DROP TRIGGER IF EXISTS jobdesk_settle_callbacks",
            "DROP TRIGGER IF EXISTS jobdesk_settle_dependents",
        ),
    )


install_after_create(
    frozenset({"jobdesk_jobs", "jobdesk_batches", "jobdesk_job_dependencies"}), ddl
)
