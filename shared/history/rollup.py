"""The history rollup: finished attempts folded into per-minute buckets.

`roll_up` reads `jobdesk_job_attempts` past the watermark (an attempt id) and adds each
attempt to the bucket of the minute it *finished* in, for its job's queue and type:

- processed: attempts that succeeded; failed: attempts that failed (error, timeout, lost
  worker, permanent error — not released or cancelled ones); dead: the failed attempts
  that left their job dead (a job's last attempt, the job now `dead`).
- queue wait: the attempt's `started_at` minus the moment its job became runnable, the
  job's `next_run_at`. That moment is only kept for a job's latest attempt (a retry
  moves `next_run_at` on), so the wait is measured for attempts that are still their
  job's latest — every first-try job and every final attempt; `waited` says how many.

Why the watermark is an attempt id and not a finished_at: an attempt row is written when
its attempt ends, so a long job that started an hour ago arrives with today's id, and a
completion delayed by a database outage arrives with a new id and an old `finished_at`
— both are picked up by id and added to the minute they finished in. A pass only moves
the watermark up to the newest attempt that finished at least `SETTLE` ago, so rows of
transactions still in flight (ids are taken before commit) are not stepped over.

Idempotent: the watermark moves with a compare-and-set in the same transaction as the
additions, so a second leader during a hand-over (or a re-run) that read the same
watermark rolls back instead of counting twice. Buckets older than `KEEP` (the longest
chart range plus a day) are deleted by `prune`. Each chunk's minutes are also summed into
`jobdesk_history_hours`, which the 7-day charts read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.models import job_attempts, jobs
from jobdesk.shared.core.states import AttemptOutcome, JobStatus
from jobdesk.shared.history.models import history_hours, history_minutes, history_watermark

#: The longest chart range is 7 days; a day more so a range that starts mid-bucket is full.
KEEP = timedelta(days=8)
#: How long after its end an attempt is surely committed (completions are stamped before
#: their short transaction begins).
SETTLE = timedelta(minutes=2)
#: Attempts read per transaction; a pass goes on chunk after chunk for up to
#: `PASS_SECONDS` (a backlog after an outage is caught up over a few passes).
CHUNK = 20_000
PASS_SECONDS = 20.0
WATERMARK = "attempts"

FAILED_OUTCOMES = (
    AttemptOutcome.FAILED.value,
    AttemptOutcome.TIMEOUT.value,
    AttemptOutcome.LOST.value,
    AttemptOutcome.PERMANENT.value,
)
_a = job_attempts.c
_j = jobs.c
_h = history_minutes.c
_w = history_watermark.c


@dataclass(frozen=True, slots=True)
class Pass:
    """One `roll_up`: attempts counted, bucket rows written, where the watermark stands."""

    attempts: int
    buckets: int
    last_attempt_id: int


class _Overtaken(Exception):
    """Another leader moved the watermark since this chunk read it."""


def roll_up(engine: sa.Engine, now: datetime) -> Pass:
    """Fold every settled attempt past the watermark into its bucket, one committed chunk
    at a time (for up to `PASS_SECONDS`; the next pass goes on from there)."""
    attempts = buckets = 0
    deadline = time.monotonic() + PASS_SECONDS
    while time.monotonic() < deadline:
        try:
            with engine.begin() as conn:
                counted, written, full = _roll_chunk(conn, now)
        except _Overtaken:
            break
        attempts, buckets = attempts + counted, buckets + written
        if not full:
            break
    with engine.connect() as conn:
        return Pass(attempts, buckets, watermark(conn)[0])


def watermark(conn: sa.Connection) -> tuple[int, datetime | None]:
    """The last attempt id counted and the moment the buckets are complete before."""
    row = conn.execute(
        sa.select(_w.last_attempt_id, _w.settled_before).where(_w.name == WATERMARK)
    ).first()
    return (0, None) if row is None else (int(row.last_attempt_id), row.settled_before)


def _roll_chunk(conn: sa.Connection, now: datetime) -> tuple[int, int, bool]:
    """Count the next chunk; returns (attempts counted, bucket rows, more may follow)."""
    _ensure_watermark(conn)
    after, _ = watermark(conn)
    settled = now - SETTLE
    window = (
        sa.select(_a.id, _a.finished_at)
        .where(_a.id > after)
        .order_by(_a.id)
        .limit(CHUNK)
        .subquery()
    )
    upto, seen = conn.execute(
        sa.select(
            sa.func.max(sa.case((window.c.finished_at < settled, window.c.id))),
            sa.func.count(),
        )
    ).one()
    # The newest settled attempt bounds the chunk; the fresher ones wait for a later pass.
    upto = after if upto is None else int(upto)
    full = int(seen) == CHUNK
    # Complete before `settled` only once nothing older is left to read.
    if not _move_watermark(conn, after, upto, None if full else settled, now):
        raise _Overtaken
    if upto == after:
        return 0, 0, False
    rows = _aggregate(conn, after, upto, horizon=now - KEEP)
    add_buckets(conn, rows)
    counted = sum(r["processed"] + r["failed"] for r in rows)
    return counted, len(rows), full


def _ensure_watermark(conn: sa.Connection) -> None:
    conn.execute(
        driver(conn)
        .insert(history_watermark)
        .values(name=WATERMARK, last_attempt_id=0)
        .on_conflict_do_nothing(index_elements=[_w.name])
    )


def _move_watermark(
    conn: sa.Connection, expected: int, upto: int, settled: datetime | None, now: datetime
) -> bool:
    values: dict[str, Any] = {"last_attempt_id": upto, "rolled_at": now}
    if settled is not None:
        values["settled_before"] = settled
    result = conn.execute(
        sa.update(history_watermark)
        .where(_w.name == WATERMARK, _w.last_attempt_id == expected)
        .values(**values)
    )
    return bool(result.rowcount)


@dataclass(frozen=True, slots=True)
class Tail:
    """The attempts past the watermark, counted live into minute rows (the History page
    reads them beside the buckets so a job that just finished shows at once)."""

    minutes: list[dict[str, Any]]
    #: More than `CHUNK` attempts wait past the watermark: only the oldest were counted.
    cut: bool


def read_tail(conn: sa.Connection, after: int, *, horizon: datetime) -> Tail:
    """Minute rows of the attempts with an id past `after` (the watermark) that finished
    after `horizon`, the oldest `CHUNK` of them at most. Written nowhere: the rollup
    counts the same attempts into the buckets once they settle."""
    window = sa.select(_a.id).where(_a.id > after).order_by(_a.id).limit(CHUNK).subquery()
    upto, seen = conn.execute(sa.select(sa.func.max(window.c.id), sa.func.count())).one()
    if upto is None:
        return Tail([], cut=False)
    return Tail(_aggregate(conn, after, int(upto), horizon=horizon), cut=int(seen) == CHUNK)


def _aggregate(
    conn: sa.Connection, after: int, upto: int, *, horizon: datetime
) -> list[dict[str, Any]]:
    failed = _a.outcome.in_(FAILED_OUTCOMES)
    last = _a.attempt == _j.attempts
    died = sa.and_(failed, last, _j.status == JobStatus.DEAD.value)
    # Only the latest attempt's runnable moment is still on the job (see the module doc).
    known = sa.and_(last, _a.started_at.is_not(None), _j.next_run_at <= _a.started_at)
    wait = driver(conn).seconds_between(_a.started_at, _j.next_run_at)
    minute = driver(conn).utc_truncated(_a.finished_at, "minute").label("minute")

    def count(condition: Any) -> Any:
        return sa.func.sum(sa.case((condition, 1), else_=0))

    query = (
        sa.select(
            minute,
            _j.queue,
            _j.job_type,
            count(_a.outcome == AttemptOutcome.SUCCEEDED.value).label("processed"),
            count(failed).label("failed"),
            count(died).label("dead"),
            count(known).label("waited"),
            sa.func.sum(sa.case((known, wait), else_=0.0)).label("wait_sum"),
            sa.func.max(sa.case((known, wait))).label("wait_max"),
        )
        .select_from(job_attempts.join(jobs, _j.id == _a.job_id))
        .where(_a.id > after, _a.id <= upto, _a.finished_at >= horizon)
        .group_by(minute, _j.queue, _j.job_type)
    )
    rows = []
    for row in conn.execute(query):
        if not (row.processed or row.failed or row.waited):
            continue  # only released or cancelled attempts: nothing to draw
        rows.append(
            {
                "minute": _as_minute(row.minute),
                "queue": row.queue,
                "job_type": row.job_type,
                "processed": int(row.processed),
                "failed": int(row.failed),
                "dead": int(row.dead),
                "waited": int(row.waited),
                "wait_seconds_sum": max(0.0, float(row.wait_sum or 0.0)),
                "wait_seconds_max": None if row.wait_max is None else max(0.0, float(row.wait_max)),
            }
        )
    return rows


def _as_minute(value: Any) -> datetime:
    if isinstance(value, str):
        return datetime.strptime(value, "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
    moment: datetime = value
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def add_buckets(conn: sa.Connection, minutes: list[dict[str, Any]]) -> None:
    """Add minute rows (`jobdesk_history_minutes` columns) to the minutes and the hours."""
    _add(conn, history_minutes, minutes)
    _add(conn, history_hours, _by_hour(minutes))


def _by_hour(minutes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The minute rows summed per hour (the worst wait is the hour's worst)."""
    hours: dict[tuple[datetime, str, str], dict[str, Any]] = {}
    for row in minutes:
        hour = row["minute"].replace(minute=0)
        key = (hour, row["queue"], row["job_type"])
        into = hours.get(key)
        if into is None:
            hours[key] = {**{k: v for k, v in row.items() if k != "minute"}, "hour": hour}
            continue
        for field in ("processed", "failed", "dead", "waited", "wait_seconds_sum"):
            into[field] += row[field]
        worst = [w for w in (into["wait_seconds_max"], row["wait_seconds_max"]) if w is not None]
        into["wait_seconds_max"] = max(worst) if worst else None
    return list(hours.values())


def _add(conn: sa.Connection, table: sa.Table, rows: list[dict[str, Any]]) -> None:
    """Add the counts to existing buckets (an attempt arriving late joins its minute)."""
    if not rows:
        return
    insert = driver(conn).insert(table)
    new, old = insert.excluded, table.c
    worst = driver(conn).greatest(old.wait_seconds_max, new.wait_seconds_max)
    statement = insert.on_conflict_do_update(
        index_elements=list(table.primary_key.columns),
        set_={
            "processed": old.processed + new.processed,
            "failed": old.failed + new.failed,
            "dead": old.dead + new.dead,
            "waited": old.waited + new.waited,
            "wait_seconds_sum": old.wait_seconds_sum + new.wait_seconds_sum,
            "wait_seconds_max": worst,
        },
    )
    # An executemany: SQLAlchemy sends it as multi-row statements where the driver can.
    conn.execute(statement, rows)


def prune(conn: sa.Connection, now: datetime) -> int:
    """Delete the buckets no chart range reaches any more; returns how many minutes."""
    conn.execute(sa.delete(history_hours).where(history_hours.c.hour < now - KEEP))
    result = conn.execute(sa.delete(history_minutes).where(_h.minute < now - KEEP))
    return int(result.rowcount or 0)
