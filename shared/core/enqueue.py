"""Putting jobs in: `enqueue` and `enqueue_many`.

Enqueue joins the caller's transaction: pass the SQLAlchemy `Connection` or `Session`
the app is already writing with, and the job commits or rolls back with the app's own
rows — "user created but no job" cannot happen. On PostgreSQL a `pg_notify` in the same
transaction wakes idle workers when (and only when) it commits.

Options left out take the type's defaults: those registered in this process (`@job`,
the built-in types), else those a worker published (read once per type and cached, see
`published_types`), else the fallback defaults — or a refusal, with
`JOBDESK_UNKNOWN_TYPES=refuse`.
"""

from __future__ import annotations

import functools
import logging
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple, TypedDict

import sqlalchemy as sa
from sqlalchemy.orm import Session, scoped_session

from jobdesk.shared.core import job_keys, validation
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.driver.base import PLAIN, Placement
from jobdesk.shared.core.enqueue_sql import (
    NOTIFY_CHANNEL,
    JobRow,
    insert_row_with_secrets,
    insert_rows,
    insert_rows_telling_new,
)
from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.core.job_types import FALLBACK_DEFAULTS, TypeDefaults, local_defaults
from jobdesk.shared.core.payload_checks import refuse_unrunnable
from jobdesk.shared.core.published_types import published_defaults
from jobdesk.shared.secrets.keys import Sealer, sealer_for
from jobdesk.shared.secrets.store import seal_secrets, store_sealed
from jobdesk.shared.settings import Settings, UnknownSettingWarning, unknown_variables
from jobdesk.shared.tracing.otel import in_span, producing
from jobdesk.shared.tracing.store import keep_traces
from jobdesk.shared.workflows import dependencies

__all__ = [
    "NOTIFY_CHANNEL",
    "EnqueueOptions",
    "NewJob",
    "connection_of",
    "enqueue",
    "enqueue_many",
]

log = logging.getLogger("jobdesk.enqueue")

#: `scoped_session` is what Flask-SQLAlchemy's `db.session` is.
Bind = sa.Connection | Session | scoped_session[Session]


@dataclass(frozen=True, slots=True)
class NewJob:
    """One job to enqueue; options left as None take the job type's defaults."""

    job_type: str
    payload: Mapping[str, Any]
    queue: str | None = None
    priority: int | None = None
    run_at: datetime | None = None
    max_attempts: int | None = None
    idempotency_key: str | None = None
    group_key: str | None = None
    timeout: float | None = None
    #: Values stored only encrypted (`JOBDESK_ENCRYPTION_KEYS`); handlers read
    #: `ctx.secrets[name]`.
    secrets: Mapping[str, str] | None = None
    #: Job ids this job waits for: it runs once every one of them succeeded.
    after: Sequence[int] | None = None
    #: With `idempotency_key`: the key deduplicates for this many seconds only.
    unique_for: float | None = None
    #: With `idempotency_key`: one job, run this many seconds after the latest enqueue,
    #: with the latest payload (`job_keys`).
    debounce: float | None = None
    #: Jobs sharing this key share its slots: at most the type's `@job(concurrency=N)`
    #: run at once, and keys take turns (`jobdesk.shared.flow.concurrency`).
    concurrency_key: str | None = None


class EnqueueOptions(TypedDict, total=False):
    """The keyword options of `enqueue`, for the functions that pass them on to it
    (`enqueue_async`, `jobdesk.contrib.django.enqueue`)."""

    queue: str | None
    priority: int | None
    run_at: datetime | None
    max_attempts: int | None
    idempotency_key: str | None
    group_key: str | None
    timeout: float | None
    secrets: Mapping[str, str] | None
    after: Sequence[int] | None
    unique_for: float | None
    debounce: float | None
    concurrency_key: str | None
    max_payload_bytes: int | None


def connection_of(bind: object) -> sa.Connection:
    """The connection to write through, refusing binds that have no transaction to join."""
    if isinstance(bind, Session | scoped_session):
        return bind.connection()
    if isinstance(bind, sa.Connection):
        return bind
    if isinstance(bind, sa.Engine):
        raise TypeError(
            "enqueue needs a Connection or Session so the job joins your transaction; "
            "use `with engine.begin() as conn: enqueue(conn, ...)`"
        )
    if type(bind).__module__.startswith("sqlalchemy.ext.asyncio"):
        raise TypeError(
            f"enqueue needs a sync Connection or Session, got {type(bind).__name__} (asyncio): "
            "use `await enqueue_async(session, ...)` / `await enqueue_many_async(...)` "
            "from jobdesk"
        )
    raise TypeError(f"enqueue needs a SQLAlchemy Connection or Session, got {type(bind).__name__}")


def enqueue(
    bind: Bind,
    job_type: str,
    payload: Mapping[str, Any],
    *,
    queue: str | None = None,
    priority: int | None = None,
    run_at: datetime | None = None,
    max_attempts: int | None = None,
    idempotency_key: str | None = None,
    group_key: str | None = None,
    timeout: float | None = None,
    secrets: Mapping[str, str] | None = None,
    after: Sequence[int] | None = None,
    unique_for: float | None = None,
    debounce: float | None = None,
    concurrency_key: str | None = None,
    max_payload_bytes: int | None = None,
) -> int:
    """Insert one job in the caller's transaction and return its id.

    Everything is validated first (`ValidationError` names the field); nothing is
    written when it fails. On PostgreSQL the same statement notifies idle workers,
    delivered only if the caller commits.

    Idempotency: a duplicate `idempotency_key` returns the existing job's id instead of
    raising — whatever that job's state: queued, running, succeeded, dead or cancelled.
    The key stays taken until the job is pruned; only then can it enqueue a new job.
    (Operator retries of a dead job create a new job that copies the key, for the
    effects ledger, but such retries are not counted by this check.) Under concurrent
    enqueues of one key on PostgreSQL, the later transaction waits for the earlier one
    and then gets its id (or inserts, if the earlier one rolled back).

    Secrets: `secrets={"api_token": …}` are sealed with the first key of
    `JOBDESK_ENCRYPTION_KEYS` (refused, naming the variable, when it is unset) and
    stored beside the job; a repeated idempotency key keeps the first job's secrets.

    Dependencies: `after=[id, …]` holds the job (`waiting`) until every listed job
    succeeded; a listed job that does not exist is refused.

    Windows (with `idempotency_key`): `unique_for=S` deduplicates for S seconds only;
    `debounce=S` keeps one queued job, moved to S seconds after the latest enqueue and
    given its payload (see `job_keys`).

    Concurrency: `concurrency_key="tenant:42"` shares the key's slots with its other
    jobs — at most the type's `@job(concurrency=N)` of them run at once; the others wait
    for a slot (`waiting`), and keys take turns in the claim order.
    """
    _warn_unknown_settings()
    conn = connection_of(bind)
    spec = NewJob(
        job_type,
        payload,
        queue,
        priority,
        run_at,
        max_attempts,
        idempotency_key,
        group_key,
        timeout,
        concurrency_key=concurrency_key,
    )
    row = _row_for(conn, spec, max_payload_bytes or _configured_payload_limit())
    waits_for = dependencies.check_after(after)
    window = _window_for(row, unique_for, debounce, secrets, waits_for)
    sealed = {} if secrets is None else {0: seal_secrets(secrets, _configured_sealer)}
    if waits_for or window:
        prepared = Prepared(
            [row],
            sealed,
            {0: waits_for} if waits_for else {},
            {0: window} if window is not None else {},
        )
        return insert_prepared(conn, prepared)[0]
    return _insert(conn, [row], sealed)[0]


def enqueue_many(
    bind: Bind,
    new_jobs: Iterable[NewJob | Mapping[str, Any]],
    *,
    max_payload_bytes: int | None = None,
) -> list[int]:
    """Insert many jobs (one statement on PostgreSQL); returns their ids in input order.

    Items are `NewJob`s or mappings with the same fields. Everything is validated before
    anything is written, so a bad item refuses the whole batch; the error names its
    index (`jobs[3].payload`). Idempotency works as in `enqueue`; a key repeated within
    the batch yields one job whose id is returned at every position that carries it.
    """
    _warn_unknown_settings()
    conn = connection_of(bind)
    prepared = prepare(conn, new_jobs, max_payload_bytes=max_payload_bytes)
    if prepared.after or prepared.windows:
        return insert_prepared(conn, prepared)
    return _insert(conn, prepared.rows, prepared.sealed)


class Prepared(NamedTuple):
    """Validated jobs ready to insert: their rows, and by row index their sealed secrets,
    `after=` ids and key windows (`unique_for` / `debounce`)."""

    rows: list[JobRow]
    sealed: dict[int, dict[str, str]]
    after: dict[int, tuple[int, ...]]
    windows: dict[int, job_keys.Window]


def prepare(
    conn: sa.Connection,
    new_jobs: Iterable[NewJob | Mapping[str, Any]],
    *,
    max_payload_bytes: int | None = None,
    label: str = "jobs",
) -> Prepared:
    """Validate every job before anything is written (errors name `label[index].field`)."""
    limit = max_payload_bytes or _configured_payload_limit()
    prepared = Prepared([], {}, {}, {})
    previous: tuple[NewJob, _Options] | None = None
    for index, item in enumerate(new_jobs):
        spec = item if isinstance(item, NewJob) else _spec_from_mapping(item, index, label)
        try:
            # A batch mostly repeats one type with the same options: options that are
            # the very same objects as the previous job's were checked already.
            options = _same_options(spec, previous) or _options_for(conn, spec)
            previous = (spec, options)
            prepared.rows.append(_row_for(conn, spec, limit, options))
            waits_for = dependencies.check_after(spec.after)
            if waits_for:
                prepared.after[index] = waits_for
            window = _window_for(
                prepared.rows[-1], spec.unique_for, spec.debounce, spec.secrets, waits_for
            )
            if window is not None:
                prepared.windows[index] = window
            if spec.secrets is not None:
                prepared.sealed[index] = seal_secrets(spec.secrets, _configured_sealer)
        except ValidationError as exc:
            raise ValidationError(f"{label}[{index}].{exc.field}", exc.message) from None
    return prepared


def insert_prepared(
    conn: sa.Connection, prepared: Prepared, *, batch_id: int | None = None
) -> list[int]:
    """Insert prepared jobs (as children of `batch_id`); their ids in input order.

    Jobs without `after=` go in together; each job with it goes alone, `waiting` for
    the dependencies not yet succeeded, its dependency rows beside it."""
    rows, sealed, after, windows = prepared
    ids: list[int] = [0] * len(rows)
    alone = {*after, *windows}
    together = [index for index in range(len(rows)) if index not in alone]
    if together:
        placement = PLAIN if batch_id is None else Placement(batch_id=batch_id)
        inserted = _insert(
            conn,
            [rows[index] for index in together],
            {position: sealed[index] for position, index in enumerate(together) if index in sealed},
            placement,
        )
        for index, job_id in zip(together, inserted, strict=True):
            ids[index] = job_id
    for index in sorted(alone):
        own = {0: sealed[index]} if index in sealed else {}
        window = windows.get(index)
        if window is None:
            ids[index] = _insert_after(conn, rows[index], own, after[index], batch_id)
        else:
            ids[index] = _insert_windowed(
                conn, rows[index], own, after.get(index, ()), batch_id, window
            )
    return ids


def insert_placed(conn: sa.Connection, prepared: Prepared, placement: Placement) -> list[int]:
    """Insert prepared jobs (no `after=`, no windows) all placed alike — a batch's
    callbacks — with their secrets and, inside a trace, its context."""
    return _insert(conn, prepared.rows, prepared.sealed, placement)


def _insert_after(
    conn: sa.Connection,
    row: JobRow,
    sealed: dict[int, dict[str, str]],
    waits_for: Sequence[int],
    batch_id: int | None,
) -> int:
    """One job, `waiting` for the dependencies not yet succeeded, with its dependency
    rows (only when it is new)."""
    missing = dependencies.unmet(conn, waits_for)
    placement = Placement(batch_id, waiting=missing > 0, waiting_for=missing or None)
    job_ids, created = _insert_telling_new(conn, [row], sealed, placement)
    dependencies.record(conn, created, waits_for)
    return job_ids[0]


def _insert_windowed(
    conn: sa.Connection,
    row: JobRow,
    sealed: dict[int, dict[str, str]],
    waits_for: Sequence[int],
    batch_id: int | None,
    window: job_keys.Window,
) -> int:
    """One job whose key deduplicates for a window (see `job_keys`): the holder's id
    while the key is held (a debounce moves the held job and gives it the payload), else
    a new job that takes the key."""
    key = row.idempotency_key
    assert key is not None  # checked with the window
    now = db_now(conn)
    taken = job_keys.take(conn, key, window, now)
    later = now + timedelta(seconds=window.seconds)
    if not taken.mine and taken.holder is not None:
        if window.kind == "unique_for":
            return taken.holder
        if driver(conn).debounce_job(conn, taken.holder, row.payload, until=later, now=now):
            return taken.holder
    if not taken.mine:
        job_keys.take_over(conn, key)  # the held job started or ended: a new one
    row = row._replace(idempotency_key=None)
    if window.kind == "debounce":
        row = row._replace(run_at=later)
    if waits_for:
        job_id = _insert_after(conn, row, sealed, waits_for, batch_id)
    else:
        placement = PLAIN if batch_id is None else Placement(batch_id=batch_id)
        job_id = _insert(conn, [row], sealed, placement)[0]
    job_keys.hold(conn, key, job_id)
    return job_id


def _window_for(
    row: JobRow,
    unique_for: object,
    debounce: object,
    secrets: object,
    waits_for: Sequence[int],
) -> job_keys.Window | None:
    window = job_keys.check_window(
        row.idempotency_key, unique_for, debounce, has_run_at=row.run_at is not None
    )
    if window is not None and window.kind == "debounce":
        if secrets is not None:
            raise ValidationError(
                "debounce", "a debounced job's secrets cannot change: no secrets="
            )
        if waits_for:
            raise ValidationError("debounce", "a debounced job runs when it is quiet: no after=")
    return window


def _insert(
    conn: sa.Connection,
    rows: list[JobRow],
    sealed: dict[int, dict[str, str]],
    placement: Placement = PLAIN,
) -> list[int]:
    """Insert the rows; with them, the sealed secrets (by row index) and — inside a
    trace — the producer span's context, both only for jobs this call created."""
    if not rows:
        return []
    if placement == PLAIN and not in_span():  # the common case: nothing beside the rows
        if not sealed:
            return insert_rows(conn, rows)
        if len(rows) == 1:  # `enqueue(..., secrets=…)`: one round trip where it can
            return [insert_row_with_secrets(conn, rows[0], sealed[0])]
    return _insert_telling_new(conn, rows, sealed, placement)[0]


def _insert_telling_new(
    conn: sa.Connection,
    rows: list[JobRow],
    sealed: dict[int, dict[str, str]],
    placement: Placement,
) -> tuple[list[int], set[int]]:
    """`_insert` through the general path, telling which ids are new jobs."""
    types = {row.job_type for row in rows}
    job_type = rows[0].job_type if len(types) == 1 else "jobs"
    with producing(job_type, rows[0].queue, len(rows)) as producer:
        ids, created = insert_rows_telling_new(conn, rows, placement)
        if producer is not None:
            context = (producer.traceparent, producer.tracestate)
            keep_traces(conn, [(job_id, *context) for job_id in sorted(created)])
            producer.sent(ids)
        kept: dict[int, dict[str, str]] = {}
        for index, values in sealed.items():
            if ids[index] in created and ids[index] not in kept:
                kept[ids[index]] = values  # a key repeated in the batch: its first secrets
        store_sealed(conn, kept)
        return ids, created


@functools.cache
def _warn_unknown_settings() -> None:
    """Once per process, at its first enqueue: warn about each `JOBDESK_*` variable that
    is no setting. The worker and the dashboard refuse to start on one; an app reads
    the few settings enqueue needs one at a time, so a misspelt name (say
    `JOBDESK_MAX_PAYLOAD_BYTE`) would otherwise be ignored without a word."""
    for message in unknown_variables():
        # stacklevel 3: the app's line that called enqueue / enqueue_many.
        warnings.warn(
            f"{message} (ignored here; a worker or the dashboard would refuse to start)",
            UnknownSettingWarning,
            stacklevel=3,
        )


_payload_limit_cache: dict[str | None, int] = {}


def _configured_payload_limit() -> int:
    """`JOBDESK_MAX_PAYLOAD_BYTES`, re-read only when the variable changes."""
    raw = os.environ.get("JOBDESK_MAX_PAYLOAD_BYTES")
    limit = _payload_limit_cache.get(raw)
    if limit is None:
        settings = Settings.from_env({} if raw is None else {"JOBDESK_MAX_PAYLOAD_BYTES": raw})
        limit = _payload_limit_cache.setdefault(raw, settings.max_payload_bytes)
    return limit


def _configured_sealer() -> Sealer:
    """The sealer of `JOBDESK_ENCRYPTION_KEYS` as the environment says now."""
    return sealer_for(os.environ.get("JOBDESK_ENCRYPTION_KEYS"))


_unknown_types_cache: dict[str | None, str] = {}


def _configured_unknown_types() -> str:
    """`JOBDESK_UNKNOWN_TYPES` (`allow` or `refuse`), re-read only when it changes."""
    raw = os.environ.get("JOBDESK_UNKNOWN_TYPES")
    policy = _unknown_types_cache.get(raw)
    if policy is None:
        settings = Settings.from_env({} if raw is None else {"JOBDESK_UNKNOWN_TYPES": raw})
        policy = _unknown_types_cache.setdefault(raw, settings.unknown_types)
    return policy


_warned_fallback: set[str] = set()


def _defaults_for(conn: sa.Connection, job_type: str) -> TypeDefaults:
    """This process's declaration, else a worker's published one, else the fallback."""
    local = local_defaults(job_type)
    if local is not None:
        return local
    published = published_defaults.lookup(conn, job_type)
    if published is not None:
        return published
    if _configured_unknown_types() == "refuse":
        # "Not published" may be a cached answer from before a worker started: look again
        # before refusing (refusals are rare; the cache serves the accepted enqueues).
        published = published_defaults.refresh(conn, job_type)
        if published is not None:
            return published
        raise ValidationError(
            "job_type",
            f"job type {job_type!r} is not registered here and no worker has published it: "
            "import its module (JOBDESK_JOB_MODULES) or start a worker that has it",
        )
    if job_type not in _warned_fallback:
        _warned_fallback.add(job_type)
        log.warning(
            "job type %r is not registered in this process and no worker has published it: "
            "options left out take the fallback defaults (queue %r, priority %d, %d "
            "attempts, the worker's timeout); set JOBDESK_UNKNOWN_TYPES=refuse to refuse "
            "such jobs",
            job_type,
            FALLBACK_DEFAULTS.queue,
            FALLBACK_DEFAULTS.priority,
            FALLBACK_DEFAULTS.max_attempts,
            extra={"action": "enqueue_fallback_defaults", "job_type": job_type},
        )
    return FALLBACK_DEFAULTS


_SPEC_FIELDS = frozenset(NewJob.__dataclass_fields__)


def _spec_from_mapping(item: object, index: int, label: str = "jobs") -> NewJob:
    if not isinstance(item, Mapping):
        raise ValidationError(
            f"{label}[{index}]", f"must be a NewJob or a mapping, got {type(item).__name__}"
        )
    unknown = set(item) - _SPEC_FIELDS
    if unknown:
        shown = ", ".join(sorted(map(str, unknown)))
        raise ValidationError(f"{label}[{index}]", f"unknown option(s): {shown}")
    if "job_type" not in item or "payload" not in item:
        raise ValidationError(f"{label}[{index}]", "needs job_type and payload")
    return NewJob(**item)


class _Options(NamedTuple):
    job_type: str
    queue: str
    priority: int
    max_attempts: int
    timeout: float | None
    concurrency: int | None


def _options_for(conn: sa.Connection, spec: NewJob) -> _Options:
    job_type = validation.check_name("job_type", spec.job_type)
    defaults = _defaults_for(conn, job_type)
    queue = validation.check_name("queue", spec.queue if spec.queue is not None else defaults.queue)
    priority = validation.check_priority(
        spec.priority if spec.priority is not None else defaults.priority
    )
    max_attempts = validation.check_max_attempts(
        spec.max_attempts if spec.max_attempts is not None else defaults.max_attempts
    )
    timeout = spec.timeout if spec.timeout is not None else defaults.timeout_seconds
    return _Options(
        job_type,
        queue,
        priority,
        max_attempts,
        None if timeout is None else validation.check_timeout(timeout),
        defaults.concurrency,
    )


def _same_options(spec: NewJob, previous: tuple[NewJob, _Options] | None) -> _Options | None:
    # Identity, not equality: True == 1 and 1.0 == 1, but only the int is valid.
    if previous is None:
        return None
    last, options = previous
    same = (
        spec.job_type is last.job_type
        and spec.queue is last.queue
        and spec.priority is last.priority
        and spec.max_attempts is last.max_attempts
        and spec.timeout is last.timeout
    )
    return options if same else None


def _row_for(
    conn: sa.Connection, spec: NewJob, payload_limit: int, options: _Options | None = None
) -> JobRow:
    options = options or _options_for(conn, spec)
    row = JobRow(
        options.job_type,
        options.queue,
        validation.serialize_payload(spec.payload, payload_limit),
        options.priority,
        options.max_attempts,
        None if spec.run_at is None else validation.check_run_at(spec.run_at),
        validation.check_key("idempotency_key", spec.idempotency_key),
        validation.check_key("group_key", spec.group_key),
        options.timeout,
    )
    if spec.concurrency_key is not None:
        row = row._replace(
            concurrency_key=validation.check_key("concurrency_key", spec.concurrency_key),
            concurrency_limit=options.concurrency,
        )
    refuse_unrunnable(options.job_type, spec.payload)  # the type's rules (@job(validate=…))
    return row
