"""Read side of dead-letter triage: unresolved dead jobs grouped by error fingerprint,
and the hourly dead-letter trend.

A fingerprint is the error with ids, numbers, UUIDs and timestamps stripped
(`jobdesk.shared.core.masking.fingerprint`), so "timeout after 10.2s talking to crm (job 812)" and
"... (job 9133)" are one group. Grouping reads the partial index
`ix_jobdesk_jobs_dead_unresolved` (fingerprint, type, finished_at) only; the sample error of
each group comes from its newest job, fetched by primary key for the shown page only.
Unfiltered on PostgreSQL, the counts come from `jobdesk.shared.core.job_counts` and the
rest from one index probe per group, so the page does not grow with the dead letters.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core import job_counts
from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.states import JobStatus
from jobdesk.shared.operator.filters import JobFilters
from jobdesk.shared.operator.queries.jobs import ERROR_EXCERPT_CHARS, filter_conditions, inline

TREND_HOURS = 24
NO_FINGERPRINT = "none"


@dataclass(frozen=True, slots=True)
class DeadGroup:
    fingerprint: str | None
    count: int
    first_seen: datetime | None
    last_seen: datetime | None
    types: dict[str, int]
    newest_job_id: int
    sample_error: str | None


@dataclass(frozen=True, slots=True)
class DeadGroups:
    groups: list[DeadGroup]
    total_jobs: int
    total_groups: int


@dataclass(slots=True)
class _Tally:
    count: int = 0
    first: datetime | None = None
    last: datetime | None = None
    newest: int = 0
    types: dict[str, int] = field(default_factory=dict)

    def add(self, row: Any) -> None:
        self.count += row.n
        if row.first_seen is not None and (self.first is None or row.first_seen < self.first):
            self.first = row.first_seen
        if row.last_seen is not None and (self.last is None or row.last_seen > self.last):
            self.last = row.last_seen
        self.types[row.job_type] = self.types.get(row.job_type, 0) + row.n
        self.newest = max(self.newest, row.newest_id)


#: Filters that leave the dead-letter groups as they are (only the presentation changes).
_NOT_NARROWING = {"status", "resolution", "time_field", "sort", "page_size"}
#: The per-group probes answer for at most this many (fingerprint, type) pairs; beyond
#: that the grouping scan is as cheap.
MAX_PROBED_PAIRS = 2000


def _narrows(filters: JobFilters) -> bool:
    return any(
        getattr(filters, item.name) != item.default
        for item in fields(filters)
        if item.name not in _NOT_NARROWING
    )


def dead_groups(
    conn: sa.Connection, filters: JobFilters, *, now: datetime, limit: int = 50
) -> DeadGroups:
    """Unresolved dead jobs matching `filters`, grouped by fingerprint, biggest first.

    Unfiltered, on PostgreSQL: the counts come from `jobdesk.shared.core.job_counts` and
    first/last seen and the newest job from one index probe each per (fingerprint,
    type), instead of reading every unresolved dead job's index entry.
    """
    if job_counts.maintained(conn) and not _narrows(filters):
        found = _groups_from_counts(conn, limit)
        if found is not None:
            return found
    conditions = filter_conditions(conn, filters.dead_unresolved(), now)
    query = (
        sa.select(
            jobs.c.error_fingerprint,
            jobs.c.job_type,
            sa.func.count().label("n"),
            sa.func.min(jobs.c.finished_at).label("first_seen"),
            sa.func.max(jobs.c.finished_at).label("last_seen"),
            sa.func.max(jobs.c.id).label("newest_id"),
        )
        .where(*conditions)
        .group_by(jobs.c.error_fingerprint, jobs.c.job_type)
    )
    merged: dict[str | None, _Tally] = {}
    for row in conn.execute(query):
        merged.setdefault(row.error_fingerprint, _Tally()).add(row)
    return _present(conn, merged, limit)


def _present(conn: sa.Connection, merged: dict[str | None, _Tally], limit: int) -> DeadGroups:
    ordered = sorted(merged.items(), key=lambda item: (-item[1].count, -item[1].newest))
    shown = ordered[:limit]
    newest_ids = [tally.newest for _, tally in shown]
    samples: dict[int, str | None] = {}
    if newest_ids:
        sample_query = sa.select(
            jobs.c.id, sa.func.substr(jobs.c.last_error, 1, ERROR_EXCERPT_CHARS)
        ).where(jobs.c.id.in_(newest_ids))
        samples = {row[0]: row[1] for row in conn.execute(sample_query)}
    groups = [
        DeadGroup(
            fingerprint=fingerprint,
            count=tally.count,
            first_seen=tally.first,
            last_seen=tally.last,
            types=dict(sorted(tally.types.items(), key=lambda kv: -kv[1])),
            newest_job_id=tally.newest,
            sample_error=samples.get(tally.newest),
        )
        for fingerprint, tally in shown
    ]
    total = sum(tally.count for tally in merged.values())
    return DeadGroups(groups, total, len(merged))


@dataclass(frozen=True, slots=True)
class _Probed:
    error_fingerprint: str | None
    job_type: str
    n: int
    first_seen: datetime | None
    last_seen: datetime | None
    newest_id: int


# Each probe repeats the partial indexes' predicate so it reads one entry of
# ix_jobdesk_jobs_dead_unresolved (finished_at order) or of its _newest twin (id order).
_PROBE = """
    SELECT {fingerprint}, g.job_type,
      (SELECT j.finished_at FROM jobdesk_jobs j WHERE {match} AND j.finished_at IS NOT NULL
        ORDER BY j.finished_at LIMIT 1),
      (SELECT j.finished_at FROM jobdesk_jobs j WHERE {match} AND j.finished_at IS NOT NULL
        ORDER BY j.finished_at DESC LIMIT 1),
      (SELECT max(j.id) FROM jobdesk_jobs j WHERE {match})
    FROM {pairs}
"""
_DEAD_UNRESOLVED = "j.status = 'dead' AND j.resolution IS NULL AND j.job_type = g.job_type"
_PROBES = sa.text(
    _PROBE.format(
        fingerprint="g.fp",
        match=f"{_DEAD_UNRESOLVED} AND j.error_fingerprint = g.fp",
        pairs="unnest(CAST(:fps AS varchar[]), CAST(:types AS varchar[])) AS g(fp, job_type)",
    )
    + " UNION ALL "
    + _PROBE.format(
        fingerprint="CAST(NULL AS varchar)",
        match=f"{_DEAD_UNRESOLVED} AND j.error_fingerprint IS NULL",
        pairs="unnest(CAST(:bare_types AS varchar[])) AS g(job_type)",
    )
)


def _groups_from_counts(conn: sa.Connection, limit: int) -> DeadGroups | None:
    """The unfiltered grouping from the kept counts; None when there are too many pairs."""
    counts = {
        (g.error_fingerprint, g.job_type): g.count
        for g in job_counts.group_counts(conn)
        if g.status == JobStatus.DEAD.value and not g.resolved and g.count > 0
    }
    if len(counts) > MAX_PROBED_PAIRS:
        return None
    keyed = [pair for pair in counts if pair[0] is not None]
    params = {
        "fps": [fp for fp, _ in keyed],
        "types": [job_type for _, job_type in keyed],
        "bare_types": [job_type for fp, job_type in counts if fp is None],
    }
    merged: dict[str | None, _Tally] = {}
    for fp, job_type, first, last, newest in conn.execute(_PROBES, params):
        if newest is None:  # resolved since the counts were read
            continue
        probed = _Probed(fp, job_type, counts[(fp, job_type)], first, last, newest)
        merged.setdefault(fp, _Tally()).add(probed)
    return _present(conn, merged, limit)


@dataclass(frozen=True, slots=True)
class TrendBucket:
    start: datetime
    count: int


def dead_trend(
    conn: sa.Connection, *, now: datetime, hours: int = TREND_HOURS
) -> list[TrendBucket]:
    """Jobs that went dead per hour over the last `hours`, oldest bucket first."""
    end = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    start = end - timedelta(hours=hours)
    bucket = driver(conn).utc_truncated(jobs.c.finished_at, "hour")
    query = (
        sa.select(bucket.label("bucket"), sa.func.count().label("n"))
        .where(jobs.c.status == inline(JobStatus.DEAD.value), jobs.c.finished_at >= start)
        .group_by(bucket)
    )
    counts: dict[str, int] = {}
    for row in conn.execute(query):
        key = row.bucket if isinstance(row.bucket, str) else row.bucket.strftime("%Y-%m-%d %H")
        counts[key] = counts.get(key, 0) + row.n
    buckets = []
    for index in range(hours):
        moment = start + timedelta(hours=index)
        buckets.append(TrendBucket(moment, counts.get(moment.strftime("%Y-%m-%d %H"), 0)))
    return buckets


def unresolved_dead_count(conn: sa.Connection) -> int:
    """Dead jobs that still need a decision (PostgreSQL: from the kept counts)."""
    if job_counts.maintained(conn):
        return sum(
            g.count
            for g in job_counts.group_counts(conn)
            if g.status == JobStatus.DEAD.value and not g.resolved
        )
    query = sa.select(sa.func.count()).where(
        jobs.c.status == inline(JobStatus.DEAD.value), jobs.c.resolution.is_(None)
    )
    return int(conn.execute(query).scalar_one())
