"""The schema: one set of typed SQLAlchemy 2 models shared by the worker and the dashboard.

Table names are part of the public contract (apps insert into `jobs` with plain SQL).
Server-side defaults fill every optional column so such an insert needs only
`job_type` and `payload`. CHECK constraints repeat the Python validation as a backstop,
and two partial indexes carry the queue's hot path:

- `ix_jobdesk_jobs_claimable`: only `queued`/`failed` rows, in claim order, so finished rows
  never slow the claim down;
- `uq_jobdesk_jobs_running_group_key`: at most one `running` job per `group_key` — per-key
  serial execution is a database fact, not a hope.

Indexes that are only ever searched for a value (`=`, `ILIKE`, a foreign key) leave NULL
rows out (`… IS NOT NULL`): every claim and completion writes a new row version, and a
NULL entry in each of them was index work on every job for nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from jobdesk.shared.core.driver.types import JSONDocument, UTCDateTime, utcnow
from jobdesk.shared.core.states import (
    ALL_STATUSES,
    CLAIMABLE,
    AttemptOutcome,
    JobStatus,
    Resolution,
)

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

PRIORITY_MIN = 0
PRIORITY_MAX = 9
PRIORITY_DEFAULT = 5
MAX_ATTEMPTS_MIN = 1
MAX_ATTEMPTS_MAX = 100
MAX_ATTEMPTS_DEFAULT = 5
DEFAULT_QUEUE = "default"
NAME_LENGTH = 100
KEY_LENGTH = 200

#: SQLite only aliases INTEGER PRIMARY KEY to the rowid; BIGINT would lose autoincrement.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def in_list(column: str, values: tuple[str, ...] | list[str]) -> str:
    quoted = ", ".join(f"'{value}'" for value in values)
    return f"{column} IN ({quoted})"


_CLAIMABLE_SQL = in_list("status", sorted(CLAIMABLE))
# NULL keys never collide in a unique index, so leaving them out changes nothing but the
# index work of every ungrouped claim.
_RUNNING_GROUP_SQL = "status = 'running' AND group_key IS NOT NULL"
#: Every job but the running ones (two PostgreSQL indexes leave those out).
_NOT_RUNNING = f"status <> '{JobStatus.RUNNING.value}'"
#: A job waiting for a slot of its concurrency key (`waiting` with no dependency left).
SLOT_WAITING_SQL = "status = 'waiting' AND waiting_for = 0 AND concurrency_key IS NOT NULL"
#: A job a quarantine holds back (`jobdesk.shared.flow.holds`).
HELD_SQL = "held_by IS NOT NULL"
#: A keyed job that may hold a slot of its key (`jobdesk.shared.flow.concurrency`).
ACTIVE_KEYED_SQL = "concurrency_key IS NOT NULL AND status IN ('failed', 'queued', 'running')"
#: Webhook deliveries that wait (the holds' probe index and its queries share it).
WAITING_WEBHOOK_SQL = "job_type = 'webhook.deliver' AND " + _CLAIMABLE_SQL


class Base(DeclarativeBase):
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: JSONDocument}


class Job(Base):
    """One unit of work: what to do (`job_type` + `payload`), when, and how it went."""

    __tablename__ = "jobdesk_jobs"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_type: Mapped[str] = mapped_column(sa.String(NAME_LENGTH))
    queue: Mapped[str] = mapped_column(sa.String(NAME_LENGTH), server_default=DEFAULT_QUEUE)
    payload: Mapped[dict[str, Any]] = mapped_column(JSONDocument, server_default=sa.text("'{}'"))
    status: Mapped[str] = mapped_column(sa.String(16), server_default=JobStatus.QUEUED.value)
    priority: Mapped[int] = mapped_column(
        sa.SmallInteger, server_default=sa.text(str(PRIORITY_DEFAULT))
    )
    attempts: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))
    max_attempts: Mapped[int] = mapped_column(
        sa.Integer, server_default=sa.text(str(MAX_ATTEMPTS_DEFAULT))
    )
    next_run_at: Mapped[datetime] = mapped_column(server_default=utcnow())
    created_at: Mapped[datetime] = mapped_column(server_default=utcnow())
    updated_at: Mapped[datetime] = mapped_column(server_default=utcnow())
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    locked_at: Mapped[datetime | None]
    locked_by: Mapped[str | None] = mapped_column(sa.String(NAME_LENGTH))
    lease_token: Mapped[int | None] = mapped_column(sa.BigInteger)
    lease_expires_at: Mapped[datetime | None]
    timeout_seconds: Mapped[float | None] = mapped_column(sa.Float)
    last_error: Mapped[str | None] = mapped_column(sa.Text)
    error_fingerprint: Mapped[str | None] = mapped_column(sa.String(32))
    idempotency_key: Mapped[str | None] = mapped_column(sa.String(KEY_LENGTH))
    group_key: Mapped[str | None] = mapped_column(sa.String(KEY_LENGTH))
    progress: Mapped[dict[str, Any] | None] = mapped_column(JSONDocument)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONDocument)
    #: The dead job this one retries. No foreign key on purpose: when retention prunes
    #: the dead job, its id stays here and leads to its tombstone (lineage survives).
    retried_from_id: Mapped[int | None] = mapped_column(BigId)
    resolution: Mapped[str | None] = mapped_column(sa.String(16))
    resolved_by: Mapped[str | None] = mapped_column(sa.String(NAME_LENGTH))
    resolved_at: Mapped[datetime | None]
    resolution_reason: Mapped[str | None] = mapped_column(sa.Text)
    #: Who cancelled the job, when and why. Set together by an operator's cancel: a
    #: queued or retrying job is `cancelled` at once; a running one keeps running until
    #: its worker stops it (its heartbeat reads `cancel_requested_at`).
    cancel_requested_at: Mapped[datetime | None]
    cancelled_by: Mapped[str | None] = mapped_column(sa.String(NAME_LENGTH))
    cancel_reason: Mapped[str | None] = mapped_column(sa.Text)
    #: The batch (`jobdesk_batches`) this job is a child of; a triage retry copies it.
    batch_id: Mapped[int | None] = mapped_column(BigId)
    #: A `waiting` job's dependencies that have not succeeded yet (None: it waits for
    #: its batch, as a callback, or does not wait).
    waiting_for: Mapped[int | None] = mapped_column(sa.Integer)
    #: Something reacts when this job ends: jobs enqueued `after=` it, or a `wait()`er.
    #: The settle triggers look at flagged rows only (`jobdesk.shared.workflows.settle`).
    watched: Mapped[bool] = mapped_column(sa.Boolean, server_default=sa.false())
    #: Jobs sharing this key share its slots (`jobdesk.shared.flow.concurrency`): at most
    #: `concurrency_limit` of them queued, retrying or running at once; without a limit,
    #: at most `FAIR_WINDOW` queued at once, which is what makes claims fair across keys.
    concurrency_key: Mapped[str | None] = mapped_column(sa.String(KEY_LENGTH))
    concurrency_limit: Mapped[int | None] = mapped_column(sa.Integer)
    #: The quarantine (`jobdesk_holds`) holding this job back: it is `waiting` until the
    #: hold is released (`jobdesk.shared.flow.holds`).
    held_by: Mapped[int | None] = mapped_column(BigId)

    __table_args__ = (
        sa.CheckConstraint(in_list("status", list(ALL_STATUSES)), name="status"),
        sa.CheckConstraint(
            "resolution IS NULL OR " + in_list("resolution", list(Resolution)),
            name="resolution",
        ),
        sa.CheckConstraint("attempts >= 0 AND attempts <= max_attempts", name="attempts"),
        sa.CheckConstraint(
            f"max_attempts BETWEEN {MAX_ATTEMPTS_MIN} AND {MAX_ATTEMPTS_MAX}", name="max_attempts"
        ),
        sa.CheckConstraint(f"priority BETWEEN {PRIORITY_MIN} AND {PRIORITY_MAX}", name="priority"),
        sa.CheckConstraint(
            f"length(job_type) BETWEEN 1 AND {NAME_LENGTH} AND length(queue) BETWEEN 1 AND "
            f"{NAME_LENGTH}",
            name="names",
        ),
        sa.CheckConstraint("timeout_seconds IS NULL OR timeout_seconds > 0", name="timeout"),
        sa.CheckConstraint(
            "concurrency_limit IS NULL OR concurrency_limit > 0", name="concurrency_limit"
        ),
        sa.Index(
            "ix_jobdesk_jobs_claimable",
            "queue",
            "priority",
            "next_run_at",
            "id",
            postgresql_where=sa.text(_CLAIMABLE_SQL),
            sqlite_where=sa.text(_CLAIMABLE_SQL),
        ),
        # The same order without the queue, for workers that serve every queue.
        sa.Index(
            "ix_jobdesk_jobs_claimable_any_queue",
            "priority",
            "next_run_at",
            "id",
            postgresql_where=sa.text(_CLAIMABLE_SQL),
            sqlite_where=sa.text(_CLAIMABLE_SQL),
        ),
        sa.Index(
            "uq_jobdesk_jobs_running_group_key",
            "group_key",
            unique=True,
            postgresql_where=sa.text(_RUNNING_GROUP_SQL),
            sqlite_where=sa.text(_RUNNING_GROUP_SQL),
        ),
        # A group's order: active jobs by (priority, id); the claim checks for predecessors.
        sa.Index(
            "ix_jobdesk_jobs_active_group",
            "group_key",
            "priority",
            "id",
            postgresql_where=sa.text(
                "group_key IS NOT NULL AND status IN ('queued', 'running', 'failed')"
            ),
            sqlite_where=sa.text(
                "group_key IS NOT NULL AND status IN ('queued', 'running', 'failed')"
            ),
        ),
        # Retries of dead jobs copy the key (their effects must stay deduplicated), so the
        # key is unique among original enqueues only. Jobs without a key are left out:
        # every claim and completion writes a new row version, and each one put a NULL
        # entry in this index for nothing (leaving them out: +22 % jobs/s, one worker,
        # alternating rounds). The predicate is what the README's plain-SQL `ON CONFLICT
        # (idempotency_key) WHERE …` names — change both together.
        sa.Index(
            "uq_jobdesk_jobs_idempotency_key",
            "idempotency_key",
            unique=True,
            postgresql_where=sa.text("retried_from_id IS NULL AND idempotency_key IS NOT NULL"),
            sqlite_where=sa.text("retried_from_id IS NULL AND idempotency_key IS NOT NULL"),
        ),
        sa.Index(
            "ix_jobdesk_jobs_running_lease",
            "lease_expires_at",
            postgresql_where=sa.text("status = 'running'"),
            sqlite_where=sa.text("status = 'running'"),
        ),
        # On PostgreSQL `running` rows stay out of these two: a job is running for moments,
        # and each claim would add an entry to both, each completion take it out again
        # (the UPDATE changes `status`, so it is never HOT). Leaving them out raised one
        # worker's throughput by 15 % in alternating rounds; the few running rows are
        # found by `ix_jobdesk_jobs_running_lease`. SQLite uses a partial index only for a
        # query that repeats its WHERE word for word, so there both stay whole.
        sa.Index(
            "ix_jobdesk_jobs_status_queue_job_type",
            "status",
            "queue",
            "job_type",
            postgresql_where=sa.text(_NOT_RUNNING),
        ),
        sa.Index(
            "ix_jobdesk_jobs_status_finished_at",
            "status",
            "finished_at",
            postgresql_where=sa.text(_NOT_RUNNING),
        ),
        # A batch's children by status (its page, `ctx.batch.counts`); only children.
        sa.Index(
            "ix_jobdesk_jobs_batch_id",
            "batch_id",
            "status",
            "id",
            postgresql_where=sa.text("batch_id IS NOT NULL"),
            sqlite_where=sa.text("batch_id IS NOT NULL"),
        ),
        # The jobs a quarantine holds (its release, its count, the job's "held" line).
        sa.Index(
            "ix_jobdesk_jobs_held_by",
            "held_by",
            "id",
            postgresql_where=sa.text(HELD_SQL),
            sqlite_where=sa.text(HELD_SQL),
        ),
        # The jobs of a key waiting for one of its slots, in the order they get one.
        sa.Index(
            "ix_jobdesk_jobs_slot_waiting",
            "concurrency_key",
            "priority",
            "id",
            postgresql_where=sa.text(SLOT_WAITING_SQL),
            sqlite_where=sa.text(SLOT_WAITING_SQL),
        ),
        # The jobs that may hold a key's slots: the slot triggers count them, the key's
        # page lists them.
        sa.Index(
            "ix_jobdesk_jobs_concurrency_key",
            "concurrency_key",
            "status",
            postgresql_where=sa.text(ACTIVE_KEYED_SQL),
            sqlite_where=sa.text(ACTIVE_KEYED_SQL),
        ),
        sa.Index(
            "ix_jobdesk_jobs_retried_from_id",
            "retried_from_id",
            postgresql_where=sa.text("retried_from_id IS NOT NULL"),
            sqlite_where=sa.text("retried_from_id IS NOT NULL"),
        ),
        # Only jobs that failed have a fingerprint: a job that never failed is not in it.
        sa.Index(
            "ix_jobdesk_jobs_dead_fingerprint",
            "status",
            "error_fingerprint",
            postgresql_where=sa.text("error_fingerprint IS NOT NULL"),
            sqlite_where=sa.text("error_fingerprint IS NOT NULL"),
        ),
        # The dead-letter triage page: unresolved dead jobs grouped by fingerprint and type,
        # with first/last seen and newest id, answered from this index alone.
        sa.Index(
            "ix_jobdesk_jobs_dead_unresolved",
            "error_fingerprint",
            "job_type",
            "finished_at",
            "id",
            postgresql_where=sa.text("status = 'dead' AND resolution IS NULL"),
            sqlite_where=sa.text("status = 'dead' AND resolution IS NULL"),
        ),
        # PostgreSQL only, for the probes that replace counting there (see job_counts);
        # SQLite keeps its grouping queries, and its planner took the first of these for
        # the dead-letter grouping, which then read the table (7 -> 40 ms at 200k jobs).
        # The newest job of each dead-letter group: one probe per group, not a count of it.
        sa.Index(
            "ix_jobdesk_jobs_dead_unresolved_newest",
            "error_fingerprint",
            "job_type",
            "id",
            postgresql_where=sa.text("status = 'dead' AND resolution IS NULL"),
        ).ddl_if(dialect="postgresql"),
        # The oldest due job of each queue (the overview's "oldest queued age") in one
        # probe per queue; the claim index has the priority in between and the retrying
        # (failed) jobs, which a walk in it would have to step over one by one.
        sa.Index(
            "ix_jobdesk_jobs_queued_since",
            "queue",
            "next_run_at",
            postgresql_where=sa.text("status = 'queued'"),
        ).ddl_if(dialect="postgresql"),
        # The waiting deliveries of one webhook endpoint, newest first, for "N jobs held
        # by paused endpoint crm" and the list behind it: a bounded probe instead of
        # reading every waiting webhook's payload. Only waiting deliveries are in it.
        sa.Index(
            "ix_jobdesk_jobs_waiting_endpoint",
            sa.text("(payload ->> 'endpoint')"),
            "id",
            postgresql_where=sa.text(WAITING_WEBHOOK_SQL),
        ).ddl_if(dialect="postgresql"),
        sa.Index(
            "ix_jobdesk_jobs_last_error_trgm",
            "last_error",
            postgresql_using="gin",
            postgresql_ops={"last_error": "gin_trgm_ops"},
            postgresql_where=sa.text("last_error IS NOT NULL"),
        ).ddl_if(dialect="postgresql"),
        # Payload search (`payload=user_id=42`): containment `payload @> '{"user_id": 42}'`
        # for any key. jsonb_path_ops hashes whole paths, so the index is smaller than the
        # default opclass and answers exactly @>. SQLite: `core.payload_terms`.
        sa.Index(
            "ix_jobdesk_jobs_payload",
            "payload",
            postgresql_using="gin",
            postgresql_ops={"payload": "jsonb_path_ops"},
        ).ddl_if(dialect="postgresql"),
        # SQLite would reuse the id of a deleted newest row; job ids are referenced by
        # audit rows, effects and links, so they must never come back.
        {"sqlite_autoincrement": True},
    )


class JobAttempt(Base):
    """One row per finished attempt: who ran it, how it ended, the (masked) error."""

    __tablename__ = "jobdesk_job_attempts"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    #: The job (no foreign key: `jobdesk.shared.core.attempt_cleanup` says why, and
    #: deletes a job's attempts with it).
    job_id: Mapped[int] = mapped_column(BigId)
    attempt: Mapped[int] = mapped_column(sa.Integer)
    worker_id: Mapped[str | None] = mapped_column(sa.String(NAME_LENGTH))
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime] = mapped_column(server_default=utcnow())
    outcome: Mapped[str] = mapped_column(sa.String(16))
    error: Mapped[str | None] = mapped_column(sa.Text)
    error_fingerprint: Mapped[str | None] = mapped_column(sa.String(32))

    __table_args__ = (
        sa.CheckConstraint(in_list("outcome", list(AttemptOutcome)), name="outcome"),
        sa.Index("ix_jobdesk_job_attempts_job_id_attempt", "job_id", "attempt"),
        sa.Index(
            "ix_jobdesk_job_attempts_error_fingerprint",
            "error_fingerprint",
            postgresql_where=sa.text("error_fingerprint IS NOT NULL"),
            sqlite_where=sa.text("error_fingerprint IS NOT NULL"),
        ),
        # The repeated-error alert scans the last minutes of failed attempts.
        sa.Index("ix_jobdesk_job_attempts_finished_at", "finished_at"),
        sa.Index(
            "ix_jobdesk_job_attempts_error_trgm",
            "error",
            postgresql_using="gin",
            postgresql_ops={"error": "gin_trgm_ops"},
            postgresql_where=sa.text("error IS NOT NULL"),
        ).ddl_if(dialect="postgresql"),
    )


class EffectState(StrEnum):
    """A ledger entry: reserved by one attempt before its side effect, then done."""

    RESERVED = "reserved"
    DONE = "done"


class Effect(Base):
    """Idempotency ledger: a side effect done under a stable key is never done again.

    An attempt reserves the key (its job id and lease token) before the effect, so a
    second job with the same key waits instead of doing it too; a reservation whose
    attempt no longer holds its job is taken over."""

    __tablename__ = "jobdesk_effects"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(sa.String(300), unique=True)
    job_id: Mapped[int | None] = mapped_column(BigId)
    created_at: Mapped[datetime] = mapped_column(server_default=utcnow())
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSONDocument)
    state: Mapped[str] = mapped_column(sa.String(16), server_default=EffectState.DONE.value)
    lease_token: Mapped[int | None] = mapped_column(sa.BigInteger)

    __table_args__ = (
        sa.CheckConstraint(in_list("state", sorted(EffectState)), name="state"),
        # Retention deletes a job's ledger rows with the job, a batch of ids at a time.
        sa.Index("ix_jobdesk_effects_job_id", "job_id"),
    )


class CancelRequest(Base):
    """An operator's cancel of a running job whose row was locked at that moment (its
    worker frozen inside a transaction, or a completion being written): recorded here
    without waiting on the lock, and moved onto the job (`cancel_requested_at` and who,
    why) by the reaper's next pass. No foreign key: the row only lives until that pass,
    which also drops requests whose job is gone."""

    __tablename__ = "jobdesk_cancel_requests"

    job_id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=False)
    requested_at: Mapped[datetime]
    requested_by: Mapped[str] = mapped_column(sa.String(NAME_LENGTH))
    reason: Mapped[str] = mapped_column(sa.Text)


class Lease(Base):
    """Named leases; `leader` elects the one worker that runs maintenance."""

    __tablename__ = "jobdesk_leases"

    name: Mapped[str] = mapped_column(sa.String(NAME_LENGTH), primary_key=True)
    holder: Mapped[str] = mapped_column(sa.String(NAME_LENGTH))
    acquired_at: Mapped[datetime] = mapped_column(server_default=utcnow())
    expires_at: Mapped[datetime]


class QueuePause(Base):
    """A paused queue: no worker claims its jobs until the row is gone (R26)."""

    __tablename__ = "jobdesk_queue_pauses"

    queue: Mapped[str] = mapped_column(sa.String(NAME_LENGTH), primary_key=True)
    paused_by: Mapped[str] = mapped_column(sa.String(NAME_LENGTH))
    paused_at: Mapped[datetime] = mapped_column(server_default=utcnow())
    reason: Mapped[str] = mapped_column(sa.Text)


class Worker(Base):
    """A running worker process and its heartbeat."""

    __tablename__ = "jobdesk_workers"

    id: Mapped[str] = mapped_column(sa.String(NAME_LENGTH), primary_key=True)
    host: Mapped[str] = mapped_column(sa.String(255))
    pid: Mapped[int] = mapped_column(sa.Integer)
    queues: Mapped[dict[str, Any] | None] = mapped_column(JSONDocument)
    job_types: Mapped[dict[str, Any] | None] = mapped_column(JSONDocument)
    concurrency: Mapped[int] = mapped_column(sa.Integer)
    version: Mapped[str] = mapped_column(sa.String(50))
    started_at: Mapped[datetime] = mapped_column(server_default=utcnow())
    last_seen_at: Mapped[datetime] = mapped_column(server_default=utcnow())
    stopping: Mapped[bool] = mapped_column(sa.Boolean, server_default=sa.false())
    #: This host's wall clock minus the database clock at the last heartbeat (C1).
    clock_skew_seconds: Mapped[float | None] = mapped_column(sa.Float)

    __table_args__ = (sa.Index("ix_jobdesk_workers_last_seen_at", "last_seen_at"),)


class PublishedJobType(Base):
    """The enqueue-time defaults a worker declared for a job type, published at its start
    so that processes which never import the job's module enqueue it the same way. One
    row per type: the worker that started last wins."""

    __tablename__ = "jobdesk_job_types"

    job_type: Mapped[str] = mapped_column(sa.String(NAME_LENGTH), primary_key=True)
    queue: Mapped[str] = mapped_column(sa.String(NAME_LENGTH))
    priority: Mapped[int] = mapped_column(sa.SmallInteger)
    max_attempts: Mapped[int] = mapped_column(sa.Integer)
    timeout_seconds: Mapped[float | None] = mapped_column(sa.Float)
    #: `@job(concurrency=N)`: copied onto each job enqueued with a `concurrency_key`.
    concurrency: Mapped[int | None] = mapped_column(sa.Integer)
    published_by: Mapped[str] = mapped_column(sa.String(NAME_LENGTH))
    published_at: Mapped[datetime] = mapped_column(server_default=utcnow())

    __table_args__ = (
        sa.CheckConstraint(
            f"max_attempts BETWEEN {MAX_ATTEMPTS_MIN} AND {MAX_ATTEMPTS_MAX}", name="max_attempts"
        ),
        sa.CheckConstraint(f"priority BETWEEN {PRIORITY_MIN} AND {PRIORITY_MAX}", name="priority"),
        sa.CheckConstraint("timeout_seconds IS NULL OR timeout_seconds > 0", name="timeout"),
    )


metadata = Base.metadata


def table_of(model: type[Base]) -> sa.Table:
    return cast(sa.Table, model.__table__)


def install_after_create(
    needs: frozenset[str], statements: Callable[[sa.Connection], Sequence[str]]
) -> None:
    """Have `metadata.create_all` (the demo, the chaos suite, tests) run `statements` for
    its database — triggers and their functions — once it has created every table in
    `needs`; the migration runs the same statements itself."""

    def install(
        target: sa.MetaData, connection: sa.Connection, tables: Sequence[sa.Table] = (), **_: object
    ) -> None:
        if needs <= {table.name for table in tables}:
            for statement in statements(connection):
                connection.exec_driver_sql(statement)

    sa.event.listen(Base.metadata, "after_create", install)


jobs = table_of(Job)
job_attempts = table_of(JobAttempt)
effects = table_of(Effect)
cancel_requests = table_of(CancelRequest)
queue_pauses = table_of(QueuePause)
leases = table_of(Lease)
workers = table_of(Worker)
published_job_types = table_of(PublishedJobType)
