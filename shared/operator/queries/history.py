"""Read side of the History page: the rollup's minutes summed into chart buckets.

A range has a fixed bucket size so every chart has 60 to 100 bars: 1 h in minutes, 24 h in
quarter hours, 7 d in two-hour buckets, aligned to UTC multiples of the bucket size so a
bucket keeps its boundaries from one refresh to the next. The database sums the minutes
into the buckets; only a few hundred rows come back. Reads the rollup
(`jobdesk_history_minutes`; `jobdesk_history_hours` for 7 days), so the cost is bounded by
the range (at most 1,440 minutes or 168 hours per queue and type), not by the queue's
size — plus the attempts the rollup has not counted yet (the last few minutes, at most
`rollup.CHUNK` of them), counted live so a job that just finished shows at once.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.driver import driver
from jobdesk.shared.history.models import history_hours, history_minutes
from jobdesk.shared.history.rollup import read_tail, watermark
from jobdesk.shared.operator.filters import choice_param, name_param

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Span:
    """A chart range and the bucket size its bars use."""

    name: str
    length: timedelta
    step: timedelta
    #: How a bucket's start is written under its bar (the axis says UTC).
    label_format: str
    #: Every how many buckets the x axis writes a time.
    label_every: int
    #: Read the hourly rollup (buckets of whole hours) instead of the minutes.
    hourly: bool = False


SPANS: dict[str, Span] = {
    "1h": Span("1h", timedelta(hours=1), timedelta(minutes=1), "%H:%M", 10),
    "24h": Span("24h", timedelta(hours=24), timedelta(minutes=15), "%H:%M", 16),
    "7d": Span("7d", timedelta(days=7), timedelta(hours=2), "%a %d", 12, hourly=True),
}
DEFAULT_SPAN = "24h"


@dataclass(frozen=True, slots=True)
class HistoryFilters:
    """Which history: a range from `SPANS`, optionally one queue and one job type."""

    span: str = DEFAULT_SPAN
    queue: str | None = None
    job_type: str | None = None

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> HistoryFilters:
        return cls(
            span=choice_param(args, "range", tuple(SPANS)) or DEFAULT_SPAN,
            queue=name_param(args, "queue"),
            job_type=name_param(args, "type"),
        )

    def to_args(self) -> dict[str, str]:
        args = {"range": self.span}
        if self.queue:
            args["queue"] = self.queue
        if self.job_type:
            args["type"] = self.job_type
        return args


@dataclass(frozen=True, slots=True)
class Bucket:
    start: datetime
    processed: int = 0
    failed: int = 0
    dead: int = 0
    waited: int = 0
    wait_seconds_sum: float = 0.0
    wait_seconds_max: float | None = None

    @property
    def wait_seconds_mean(self) -> float | None:
        return self.wait_seconds_sum / self.waited if self.waited else None


@dataclass(frozen=True, slots=True)
class History:
    span: Span
    start: datetime
    end: datetime
    buckets: list[Bucket]
    #: The queues and job types that have history in the range (the filters' choices).
    queues: list[str]
    job_types: list[str]
    #: Attempts that finished before this are all counted (None: never rolled up).
    settled_before: datetime | None
    #: Attempts the rollup has not counted yet were read live from the attempts table.
    live_tail: bool = False
    #: More attempts wait for the rollup than one live read takes (the rollup is behind).
    tail_cut: bool = False

    @property
    def empty(self) -> bool:
        return not any(b.processed or b.failed or b.waited for b in self.buckets)

    def total(self, field: str) -> int:
        return sum(int(getattr(b, field)) for b in self.buckets)

    def peak(self, field: str) -> float:
        values = [getattr(b, field) for b in self.buckets]
        return max((v for v in values if v is not None), default=0)

    @property
    def wait_seconds_max(self) -> float | None:
        values = [b.wait_seconds_max for b in self.buckets if b.wait_seconds_max is not None]
        return max(values) if values else None

    @property
    def wait_seconds_mean(self) -> float | None:
        waited = self.total("waited")
        return sum(b.wait_seconds_sum for b in self.buckets) / waited if waited else None


def _floor(moment: datetime, step: timedelta) -> datetime:
    return moment - (moment - _EPOCH) % step


def _bucket_key(conn: sa.Connection, moment: Any, step: timedelta) -> Any:
    """Which bucket a minute falls in: its UTC epoch seconds divided by the step, floored
    (half a minute added, so float rounding never drops a whole minute into the previous
    bucket). Cheap on both databases: one float expression per row."""
    return driver(conn).epoch_bucket(moment, int(step.total_seconds()))


def read_history(conn: sa.Connection, filters: HistoryFilters, *, now: datetime) -> History:
    """The buckets of `filters.span` up to now (the newest bucket is still filling).

    One pass over the range's minutes, summed per bucket, queue and type: the same rows
    give the chosen queue's and type's bars and the filters' choices (every queue and
    type with history in the range), at most buckets times groups rows back. The
    attempts past the watermark are added live; if the rollup moved the watermark while
    this read, it reads again (the buckets and the tail must meet at one attempt id)."""
    span = SPANS[filters.span]
    end = _floor(now, span.step) + span.step
    start = end - span.length
    for _ in range(5):
        after, settled_before = watermark(conn)
        rows = [*_bucket_rows(conn, span, start, end)]
        tail = read_tail(conn, after, horizon=start)
        if watermark(conn)[0] == after:
            break
    first = int((start - _EPOCH) // span.step)
    for row in tail.minutes:
        rows.append(
            {
                **row,
                "bucket": int((row["minute"] - _EPOCH) // span.step),
                "wait_sum": row["wait_seconds_sum"],
                "wait_max": row["wait_seconds_max"],
            }
        )
    count = int(span.length / span.step)
    sums: list[list[Any]] = [[0, 0, 0, 0, 0.0, None] for _ in range(count)]
    queues: set[str] = set()
    job_types: set[str] = set()
    for row in rows:
        queues.add(row["queue"])
        job_types.add(row["job_type"])
        if filters.queue and row["queue"] != filters.queue:
            continue
        if filters.job_type and row["job_type"] != filters.job_type:
            continue
        position = int(row["bucket"]) - first
        if not 0 <= position < count:
            continue
        into = sums[position]
        into[0] += int(row["processed"] or 0)
        into[1] += int(row["failed"] or 0)
        into[2] += int(row["dead"] or 0)
        into[3] += int(row["waited"] or 0)
        into[4] += float(row["wait_sum"] or 0.0)
        if row["wait_max"] is not None:
            worst = float(row["wait_max"])
            into[5] = worst if into[5] is None else max(into[5], worst)
    return History(
        span=span,
        start=start,
        end=end,
        buckets=[Bucket(start + span.step * i, *values) for i, values in enumerate(sums)],
        queues=sorted(queues),
        job_types=sorted(job_types),
        settled_before=settled_before,
        live_tail=bool(tail.minutes),
        tail_cut=tail.cut,
    )


def _bucket_rows(
    conn: sa.Connection, span: Span, start: datetime, end: datetime
) -> Iterator[dict[str, Any]]:
    """The rollup's rows in the range, summed per bucket, queue and type."""
    table = history_hours if span.hourly else history_minutes
    c = table.c
    moment = c.hour if span.hourly else c.minute
    index = _bucket_key(conn, moment, span.step).label("bucket")
    query = (
        sa.select(
            index,
            c.queue,
            c.job_type,
            sa.func.sum(c.processed).label("processed"),
            sa.func.sum(c.failed).label("failed"),
            sa.func.sum(c.dead).label("dead"),
            sa.func.sum(c.waited).label("waited"),
            sa.func.sum(c.wait_seconds_sum).label("wait_sum"),
            sa.func.max(c.wait_seconds_max).label("wait_max"),
        )
        .where(moment >= start, moment < end)
        .group_by(index, c.queue, c.job_type)
    )
    for row in conn.execute(query):
        yield dict(row._mapping)
