"""`Driver`: what Jobdesk needs from a database, stated once; one subclass per dialect.

The methods come in groups: capabilities (what this database offers at all),
statements for tables that need a dialect's own upsert or locking, and SQL expressions
whose spelling differs (time buckets, JSON fields, epochs). Each says what it returns
on both databases, so callers never need to know which one they have.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, ClassVar, Literal, NamedTuple, Protocol, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import Insert as PostgreSQLInsert
from sqlalchemy.dialects.sqlite import Insert as SQLiteInsert

from jobdesk.shared.core.db import dump_json
from jobdesk.shared.core.driver.hold_triggers import holdable
from jobdesk.shared.core.models import job_attempts, jobs
from jobdesk.shared.core.states import CANCELLABLE, STOPPABLE, JobStatus, sql_values
from jobdesk.shared.settings import Settings

SelectT = TypeVar("SelectT", bound=sa.Select[Any])
T = TypeVar("T")

#: The INSERT of either dialect: both offer `on_conflict_do_nothing/do_update` and
#: `excluded` with the same arguments.
UpsertInsert = PostgreSQLInsert | SQLiteInsert
TimeUnit = Literal["minute", "hour", "day"]


class AttemptRef(Protocol):
    """The attempt a worker-side write is for: the compare-and-set key (`id`, status
    `running`, `lease_token`) and what its attempt row records."""

    @property
    def id(self) -> int: ...
    @property
    def lease_token(self) -> int | None: ...
    @property
    def attempt(self) -> int: ...
    @property
    def worker_id(self) -> str: ...
    @property
    def started_at(self) -> datetime | None: ...


class JobRow(NamedTuple):
    """One validated job for `insert_jobs` (field order = column order)."""

    job_type: str
    queue: str
    payload: str  # JSON text, validated
    priority: int
    max_attempts: int
    run_at: datetime | None
    idempotency_key: str | None
    group_key: str | None
    timeout_seconds: float | None
    concurrency_key: str | None = None
    concurrency_limit: int | None = None


class Placement(NamedTuple):
    """Where the rows of one `insert_jobs` call go, the same for all of them: a batch's
    children carry its id; jobs that must wait (callbacks, dependents) start `waiting`,
    a dependent with the count of its dependencies not yet succeeded."""

    batch_id: int | None = None
    waiting: bool = False
    waiting_for: int | None = None


#: Plain jobs: queued, in no batch.
PLAIN = Placement()


class Inserted(NamedTuple):
    """What `insert_jobs` made: ids of new rows without a key (input order) and
    key -> id of new rows with one (a key already taken is absent)."""

    unkeyed: list[int]
    by_key: dict[str, int]


class ClaimFilter(NamedTuple):
    """Which jobs a claim may take (None: any)."""

    queues: Sequence[str] | None
    job_types: Sequence[str] | None


class ClaimBatch(NamedTuple):
    """A claim's rows, in claim order, as tuples of `CLAIM_COLUMNS`, and the lease they
    got. `decoded`: the payloads are parsed JSON values; otherwise the stored text."""

    rows: list[tuple[Any, ...]]
    now: datetime
    expires: datetime
    decoded: bool


class Completion(NamedTuple):
    """One success to write. `ref` may be the claimed job itself (it has the same
    fields), which saves building a ref per job on the hot path."""

    ref: Any
    result: Any = None


class Failure(NamedTuple):
    """One failed attempt to write: `retry_at` None means no retry (dead); `error` is
    already sanitised; `outcome` is the attempt's (`failed`, `timeout`, `lost`, …)."""

    ref: AttemptRef
    error: str
    fingerprint: str | None
    retry_at: datetime | None
    outcome: str


class HandBack(NamedTuple):
    """One attempt handed back unstarted or stopped by the worker (snoozed, released):
    the job is due again at `until`."""

    ref: AttemptRef
    until: datetime


class LeaseRenewal(NamedTuple):
    """What one renewal did: ids whose lease was pushed, ids still held by the caller
    whose row was locked by someone else (not renewed now, not lost either), and ids
    still held that have a cancel request (`cancel_requested_at` set)."""

    renewed: list[int]
    busy: list[int]
    stopping: tuple[int, ...] = ()


class Driver(ABC):
    """One database's way of doing what Jobdesk asks (see the package)."""

    #: SQLAlchemy's dialect name.
    name: ClassVar[str]
    #: Workers can be woken by LISTEN/NOTIFY (else they poll).
    listens: ClassVar[bool]
    #: Row locks exist (`FOR UPDATE`); without them a transaction locks the database.
    locks_rows: ClassVar[bool]
    #: Triggers keep `jobdesk_job_counts` (else counts are read off the jobs).
    keeps_job_counts: ClassVar[bool]
    #: One statement may write through a data-modifying CTE (and a read carry a write).
    writes_in_ctes: ClassVar[bool]
    #: The step of the database clock (`utcnow()`), in microseconds: a time Jobdesk
    #: computes is cut to it, so it never sorts after a later time the database stamps
    #: (SQLite's `'now'` has milliseconds: 12:00:00.578516 would sort after a claim
    #: stamped 12:00:00.578).
    clock_step_microseconds: ClassVar[int] = 1

    # --- the jobs table: the core verbs ----------------------------------------------
    # Every statement that writes `jobdesk_jobs` is in a driver (a test checks it).

    @abstractmethod
    def insert_jobs(
        self, conn: sa.Connection, rows: Sequence[JobRow], placement: Placement = PLAIN
    ) -> Inserted:
        """Enqueue: insert `rows` in the caller's transaction, in input order (ids grow
        in that order); a row whose idempotency key is taken is left out. Wakes idle
        workers of the rows' queues when the caller commits, where the database can.
        `placement`: their batch and whether they start `waiting`."""

    def insert_job_with_secrets(
        self, conn: sa.Connection, row: JobRow, sealed: Mapping[str, str]
    ) -> Inserted:
        """Enqueue one job with its sealed secrets, stored only if the job is new (a taken
        key keeps the first job's). Two statements here; a driver may make it one."""
        from jobdesk.shared.secrets.store import store_sealed

        inserted = self.insert_jobs(conn, [row])
        new = [*inserted.unkeyed, *inserted.by_key.values()]
        if new:
            store_sealed(conn, {new[0]: sealed})
        return inserted

    @abstractmethod
    def claim_jobs(
        self,
        conn: sa.Connection,
        *,
        worker_id: str,
        token: int,
        limit: int,
        which: ClaimFilter,
        lease_seconds: float,
        now: datetime | None,
    ) -> ClaimBatch:
        """Claim: take up to `limit` due jobs, oldest first by (priority, next_run_at,
        id), under a lease with fencing `token`; `attempts` grows by one. Without `now`
        the database clock decides what is due."""

    def claimed_rows(
        self, conn: sa.Connection, worker_id: str, token: int
    ) -> list[tuple[Any, ...]]:
        """The rows of one claim (its token is unique), payloads as stored text, in claim
        order: for decoding them one by one."""
        query = (
            sa.select(
                jobs.c.id, jobs.c.job_type, jobs.c.queue, sa.cast(jobs.c.payload, sa.Text),
                jobs.c.attempts, jobs.c.max_attempts, jobs.c.priority,
                jobs.c.idempotency_key, jobs.c.group_key, jobs.c.timeout_seconds,
            )
            .where(
                jobs.c.status == JobStatus.RUNNING.value,
                jobs.c.locked_by == worker_id,
                jobs.c.lease_token == token,
            )
            .order_by(jobs.c.priority, jobs.c.next_run_at, jobs.c.id)
        )  # fmt: skip
        return [tuple(row) for row in conn.execute(query)]

    @abstractmethod
    def complete_jobs(
        self, conn: sa.Connection, completions: Sequence[Completion], *, now: datetime
    ) -> list[int]:
        """Complete: mark attempts succeeded (result stored, lease cleared) and write
        their attempt rows; the ids completed (a lost lease is left out)."""

    @abstractmethod
    def fail_jobs(
        self, conn: sa.Connection, failures: Sequence[Failure], *, now: datetime
    ) -> dict[int, JobStatus]:
        """Fail (and rescue, which is failing a lost attempt; one failure per job):
        `failed` until the retry, `dead` without one or with the attempts spent,
        `cancelled` when an operator asked; the attempt rows written. Returns the new
        status of each job written (a lost lease is left out)."""

    @abstractmethod
    def renew_leases(
        self, conn: sa.Connection, refs: Sequence[AttemptRef], *, expires: datetime, now: datetime
    ) -> LeaseRenewal:
        """Heartbeat: push the lease of every job in `refs` still held to `expires`,
        never waiting on a row another transaction holds (`busy`), and say which held
        jobs have a cancel request (`stopping`)."""

    @abstractmethod
    def hand_back_jobs(
        self, conn: sa.Connection, handbacks: Sequence[HandBack], *, now: datetime
    ) -> dict[int, JobStatus]:
        """Snooze / release: back to `queued` until each `until` without counting the
        attempt, or `cancelled` for a job with a cancel request. Returns the new status
        of each job written (a lost lease is left out)."""

    def stop_cancelled(self, conn: sa.Connection, ref: AttemptRef, *, now: datetime) -> bool:
        """Cancel a running job its worker stopped on request (only one with a request)."""
        row = conn.execute(
            sa.update(jobs)
            .where(_is_mine(ref), jobs.c.cancel_requested_at.is_not(None))
            .values(
                status=JobStatus.CANCELLED.value, finished_at=now, updated_at=now, **_RELEASE_LOCK
            )
            .returning(jobs.c.id)
        ).first()
        return row is not None

    def record_progress(
        self, conn: sa.Connection, ref: AttemptRef, progress: dict[str, Any]
    ) -> bool:
        """A handler's progress, while its attempt still holds the job (fenced)."""
        row = conn.execute(
            sa.update(jobs).where(_is_mine(ref)).values(progress=progress).returning(jobs.c.id)
        ).first()
        return row is not None

    def record_attempt(
        self,
        conn: sa.Connection,
        ref: AttemptRef,
        *,
        outcome: str,
        error: str | None,
        fingerprint: str | None = None,
        now: datetime,
    ) -> None:
        """One attempt row (the verbs above write their own; this is for the others)."""
        conn.execute(
            sa.insert(job_attempts).values(
                job_id=ref.id,
                attempt=ref.attempt,
                worker_id=ref.worker_id,
                started_at=ref.started_at,
                finished_at=now,
                outcome=outcome,
                error=error,
                error_fingerprint=fingerprint,
            )
        )

    def prune_jobs(
        self, conn: sa.Connection, ids: Sequence[int], still: sa.ColumnElement[bool]
    ) -> int:
        """Prune: delete the jobs of `ids` for which `still` holds (retention's guard,
        re-checked at delete time); their attempts go with them (triggers). How many."""
        if not ids:
            return 0
        result = conn.execute(sa.delete(jobs).where(jobs.c.id.in_(list(ids)), still))
        return int(result.rowcount or 0)

    # --- the operator's verbs (each caller writes its audit rows) ------------------------

    def resolve_dead(
        self,
        conn: sa.Connection,
        ids: Sequence[int],
        resolution: str,
        *,
        actor: str,
        reason: str | None,
        now: datetime,
    ) -> list[int]:
        """The decision ON still-unresolved dead jobs (compare-and-set); those marked."""
        statement = (
            sa.update(jobs)
            .where(
                jobs.c.id.in_(list(ids)),
                jobs.c.status == JobStatus.DEAD.value,
                jobs.c.resolution.is_(None),
            )
            .values(
                resolution=resolution,
                resolved_by=actor,
                resolved_at=now,
                resolution_reason=reason,
                updated_at=now,
            )
            .returning(jobs.c.id)
        )
        return sorted(conn.execute(statement).scalars())

    def copy_as_new(
        self, conn: sa.Connection, ids: Sequence[int], columns: Sequence[str], *, now: datetime
    ) -> dict[int, int]:
        """New queued jobs copying `columns` of these jobs, due now, each naming its
        original (`retried_from_id`); {original id: new id}."""
        stamp = sa.literal(now, jobs.c.created_at.type)
        source = sa.select(
            *(jobs.c[name] for name in columns), jobs.c.id, stamp, stamp, stamp
        ).where(jobs.c.id.in_(list(ids)))
        statement = (
            sa.insert(jobs)
            .from_select(
                [*columns, "retried_from_id", "next_run_at", "created_at", "updated_at"], source
            )
            .returning(jobs.c.retried_from_id, jobs.c.id)
        )
        return dict(sorted((int(old), int(new)) for old, new in conn.execute(statement)))

    def watch_jobs(self, conn: sa.Connection, ids: Sequence[int]) -> dict[int, str]:
        """Flag jobs `watched` (something reacts when they end: the settle triggers look
        at them), locking their rows; {id: status} of those that exist. On PostgreSQL an
        outcome being written meanwhile is waited for and then read."""
        if not ids:
            return {}
        rows = conn.execute(
            sa.update(jobs)
            .where(jobs.c.id.in_(list(ids)))
            .values(watched=True)
            .returning(jobs.c.id, jobs.c.status)
        ).all()
        return {int(job_id): str(status) for job_id, status in rows}

    def debounce_job(
        self, conn: sa.Connection, job_id: int, payload: Any, *, until: datetime, now: datetime
    ) -> bool:
        """A debounced enqueue: the still-queued job takes the new payload and starts at
        `until`; False when it is no longer queued (started, ended, cancelled)."""
        row = conn.execute(
            sa.update(jobs)
            .where(jobs.c.id == job_id, jobs.c.status == JobStatus.QUEUED.value)
            .values(payload=payload, next_run_at=until, updated_at=now)
            .returning(jobs.c.id)
        ).first()
        return row is not None

    def set_payload(self, conn: sa.Connection, ids: Sequence[int], payload: Any) -> None:
        """Replace the payload of these (new, not yet claimed) jobs: a fixed retry's."""
        conn.execute(sa.update(jobs).where(jobs.c.id.in_(list(ids))).values(payload=payload))

    def hold_jobs(
        self,
        conn: sa.Connection,
        hold_id: int,
        matching: sa.ColumnElement[bool],
        *,
        now: datetime,
    ) -> int:
        """Park the jobs `matching` that could run (queued, retrying, waiting for a slot)
        and no hold has yet: `waiting`, `held_by` the hold; how many."""
        return conn.execute(
            sa.update(jobs)
            .where(matching, sa.text(holdable("jobdesk_jobs")))
            .values(
                status=JobStatus.WAITING.value, waiting_for=None, held_by=hold_id, updated_at=now
            )
        ).rowcount

    def release_held(self, conn: sa.Connection, hold_id: int, *, now: datetime) -> int:
        """Let the jobs of a released hold go: `queued` again at their own time (the slot
        and hold triggers park again what a key's slots or another hold still stop)."""
        return conn.execute(
            sa.update(jobs)
            .where(jobs.c.held_by == hold_id, jobs.c.status == JobStatus.WAITING.value)
            .values(status=JobStatus.QUEUED.value, held_by=None, updated_at=now)
        ).rowcount

    def cancel_jobs(
        self,
        conn: sa.Connection,
        ids: Sequence[int],
        *,
        actor: str,
        reason: str,
        asked_at: datetime,
        now: datetime,
    ) -> list[int]:
        """Cancel: queued or retrying jobs end `cancelled` (who, when asked, why); those
        cancelled."""
        return sorted(
            conn.execute(
                sa.update(jobs)
                .where(jobs.c.id.in_(list(ids)), jobs.c.status.in_(sql_values(CANCELLABLE)))
                .values(
                    status=JobStatus.CANCELLED.value,
                    finished_at=now,
                    updated_at=now,
                    cancel_requested_at=asked_at,
                    cancelled_by=actor,
                    cancel_reason=reason,
                )
                .returning(jobs.c.id)
            ).scalars()
        )

    def request_cancel(
        self,
        conn: sa.Connection,
        ids: Sequence[int],
        *,
        actor: str,
        reason: str,
        asked_at: datetime,
        now: datetime,
    ) -> tuple[list[int], list[int]]:
        """Put a cancel request on running jobs that have none, never waiting on a row
        another transaction holds: (ids asked, ids passed over because their row was
        locked — the caller parks those)."""
        unasked = (
            jobs.c.id.in_(list(ids)),
            jobs.c.status.in_(sql_values(STOPPABLE)),
            jobs.c.cancel_requested_at.is_(None),
        )
        lockable = self.for_update(
            sa.select(jobs.c.id).where(*unasked), skip_locked=True, key_share=True
        )
        asked = sorted(
            conn.execute(
                sa.update(jobs)
                .where(*unasked, jobs.c.id.in_(lockable.scalar_subquery()))
                .values(
                    cancel_requested_at=asked_at,
                    cancelled_by=actor,
                    cancel_reason=reason,
                    updated_at=now,
                )
                .returning(jobs.c.id)
            ).scalars()
        )
        if not self.locks_rows:
            return asked, []
        seen = conn.execute(sa.select(jobs.c.id).where(*unasked)).scalars()
        return asked, sorted(job_id for job_id in seen if job_id not in set(asked))

    @abstractmethod
    def refill_slots(
        self, conn: sa.Connection, *, after_key: str, max_keys: int
    ) -> tuple[int, str | None]:
        """Move waiting jobs into the free slots of the concurrency keys that have both,
        looking at up to `max_keys` keys after `after_key` in key order (a slot given up
        in a race stays free until then: `jobdesk.shared.flow.concurrency`); how many
        jobs moved in, and the last key looked at (None: no key after it)."""

    @abstractmethod
    def notify_queues(self, conn: sa.Connection, queues: Sequence[str]) -> None:
        """Wake idle workers of these queues when the caller commits (where the
        database can: LISTEN/NOTIFY); workers elsewhere find the jobs by polling."""

    def release_deliveries(
        self, conn: sa.Connection, job_type: str, endpoint: str, *, now: datetime
    ) -> int:
        """Make the snoozed (queued, not yet due) jobs of `job_type` for `endpoint` (their
        payload's `endpoint`) due now; how many."""
        result = conn.execute(
            sa.update(jobs)
            .where(
                jobs.c.job_type == job_type,
                jobs.c.status == JobStatus.QUEUED.value,
                jobs.c.next_run_at > now,
                jobs.c.payload["endpoint"].as_string() == endpoint,
            )
            .values(next_run_at=now, updated_at=now)
        )
        return int(result.rowcount or 0)

    def set_progress(self, conn: sa.Connection, job_id: int, progress: dict[str, Any]) -> bool:
        """Store a job's progress for someone other than its worker (a report run
        mirroring its chunks); the worker's own progress is fenced (`record_progress`)."""
        done = conn.execute(sa.update(jobs).where(jobs.c.id == job_id).values(progress=progress))
        return bool(done.rowcount)

    # --- hot paths ------------------------------------------------------------------

    def execute_fast(
        self, conn: sa.Connection, statement: sa.Executable, params: dict[str, Any]
    ) -> Any:
        """Run a prebuilt statement that runs once per job; the result has `fetchone()`
        (rows as tuples in the statement's column order)."""
        return conn.execute(statement, params)

    def json_param(self, value: Any) -> Any:
        """A JSON parameter for `execute_fast`, serialised as the engine does."""
        return dump_json(value)

    # --- engines and connections ----------------------------------------------------

    @abstractmethod
    def make_engine(
        self,
        url: sa.URL,
        *,
        settings: Settings,
        sqlite_begin: str,
        pool_size: int,
        application_name: str,
        index_plans: bool,
        idle_in_transaction_seconds: float | None,
    ) -> sa.Engine:
        """An engine with the settings a job queue needs on this database (see
        `shared.core.db.make_engine`)."""

    def is_pooled(self, bind: sa.Connection | sa.Engine) -> bool:
        """Connections go through a transaction-pooling proxy (PgBouncer)."""
        return False

    def sets_deadlines_per_transaction(self, bind: sa.Connection | sa.Engine) -> bool:
        """Statements are bounded only inside a transaction (behind PgBouncer)."""
        return False

    def autocommits_single_statements(self, bind: sa.Connection | sa.Engine) -> bool:
        """One-statement work may run in autocommit and keep its deadline."""
        return False

    def equals_any(self, column: sa.ColumnElement[Any], name: str) -> sa.ColumnElement[bool]:
        """`column` equal to one of the list bound as `name`: an expanding `IN` here (a
        statement per list length)."""
        return column.in_(sa.bindparam(name, expanding=True))

    def end_claim_session(self, conn: sa.Connection) -> None:
        """Undo what claims set on `conn`'s session, before it goes back to the pool."""
        return

    def bound_transaction(self, conn: sa.Connection, seconds: float) -> None:
        """Bound the current transaction's idle time and lock waits to `seconds`, where
        the database can (nothing on SQLite: one writer at a time, its busy timeout
        bounds the waiting)."""
        return

    # --- per-database declarations -------------------------------------------------------

    def choose(self, *, postgresql: T, sqlite: T) -> T:
        """The value declared for this database: schema objects a feature declares per
        database (its triggers and their functions) are picked here, never by a test of
        the dialect."""
        chosen: T = {"postgresql": postgresql, "sqlite": sqlite}[self.name]
        return chosen

    # --- statements ----------------------------------------------------------------

    @abstractmethod
    def insert(self, table: sa.Table) -> UpsertInsert:
        """An INSERT into `table` that can say what to do ON CONFLICT."""

    @abstractmethod
    def for_update(
        self, query: SelectT, *, skip_locked: bool = False, key_share: bool = False
    ) -> SelectT:
        """`query` locking the rows it reads until the transaction ends (PostgreSQL); on
        SQLite unchanged — its write transaction already excludes every other writer."""

    @abstractmethod
    def take_tokens(
        self,
        conn: sa.Connection,
        key: str,
        want: int,
        *,
        capacity: float,
        refill_per_second: float,
        now: datetime,
    ) -> tuple[int, float]:
        """Take up to `want` whole tokens from rate-limit bucket `key` (refilled up to
        `capacity` at `refill_per_second` since it was last written; a new bucket
        starts full): `(taken, level left)` with `taken >= 1`, or `(0, level)` having
        written nothing when not one whole token is there."""

    @abstractmethod
    def statement_deadline(
        self, conn: sa.Connection, seconds: float
    ) -> AbstractContextManager[None]:
        """Bound every statement run inside the block (the caller's open transaction)."""

    @abstractmethod
    def estimate_count(self, conn: sa.Connection, query: sa.Select[Any]) -> int | None:
        """The planner's estimate of how many rows `query` returns, or None when the
        database has none to give (SQLite)."""

    # --- expressions ---------------------------------------------------------------

    @abstractmethod
    def utc_truncated(self, column: Any, unit: TimeUnit) -> sa.ColumnElement[Any]:
        """A UTC timestamp column cut to the start of its minute, hour or day: a
        timestamp on PostgreSQL, fixed-width text ("YYYY-MM-DD HH:MM") on SQLite; either
        groups and compares in time order."""

    @abstractmethod
    def utc_date_text(self, column: Any) -> sa.ColumnElement[str]:
        """A UTC timestamp column's date as "YYYY-MM-DD" text."""

    @abstractmethod
    def epoch_seconds(self, moment: Any) -> sa.ColumnElement[float]:
        """Seconds since 1970-01-01 UTC of a timestamp column."""

    @abstractmethod
    def seconds_between(self, later: Any, earlier: Any) -> sa.ColumnElement[float]:
        """`later - earlier` in seconds (a float)."""

    @abstractmethod
    def epoch_bucket(self, moment: Any, seconds: int) -> sa.ColumnElement[int]:
        """Which `seconds`-long bucket since the epoch a minute falls in (half a minute
        added, so float rounding never drops a whole minute into the bucket before)."""

    @abstractmethod
    def contains_like(self, column: Any, pattern: str, escape: str) -> sa.ColumnElement[bool]:
        """`column LIKE pattern` ignoring case, as the database's text search indexes
        serve it (PostgreSQL: ILIKE through trigram indexes; SQLite: LIKE, which ignores
        ASCII case)."""

    @abstractmethod
    def payload_match(self, path: tuple[str, ...], values: Sequence[Any]) -> sa.ColumnElement[bool]:
        """Jobs whose payload holds one of `values` (JSON scalars) at `path` (at most two
        keys deep), as an index lookup (PostgreSQL: JSONB containment through the GIN
        index; SQLite: a probe of `jobdesk_payload_terms`)."""

    @abstractmethod
    def greatest(self, first: Any, second: Any) -> sa.ColumnElement[Any]:
        """The larger of two values, ignoring a NULL one (NULL when both are)."""

    @abstractmethod
    def payload_text_sql(self, key: str) -> str:
        """SQL text for the top-level string `key` of `payload` in a statement over
        `jobdesk_jobs` (NULL when the payload has none, or — SQLite — is not JSON at
        all), spelled the way the database's indexes on that field spell it, so the
        planner can use them."""

    @abstractmethod
    def payload_text(self, key: str) -> sa.ColumnElement[str]:
        """`payload_text_sql(key)` as a column expression of `jobdesk_jobs`."""


def check_payload_key(key: str) -> str:
    """Keys written into SQL text: letters, digits and underscores only."""
    if not key or not key.replace("_", "").isalnum():
        raise ValueError(f"payload key {key!r}: letters, digits and _ only")
    return key


def refilled(
    tokens: float, elapsed_seconds: float, capacity: float, refill_per_second: float
) -> float:
    """A token bucket's level after `elapsed_seconds` of refill (never above capacity)."""
    return min(capacity, tokens + max(0.0, elapsed_seconds) * refill_per_second)


def first_take(capacity: float, want: int) -> int:
    """What the first taker of a new (full) bucket gets."""
    return min(want, math.floor(capacity))


_RELEASE_LOCK: dict[str, Any] = {
    "locked_by": None,
    "locked_at": None,
    "lease_token": None,
    "lease_expires_at": None,
}


def _is_mine(ref: AttemptRef) -> sa.ColumnElement[bool]:
    """The worker-side compare-and-set: still `running` under this attempt's token."""
    return sa.and_(
        jobs.c.id == ref.id,
        jobs.c.status == JobStatus.RUNNING.value,
        jobs.c.lease_token == ref.lease_token,
    )
