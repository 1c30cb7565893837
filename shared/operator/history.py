"""Read side of the History page: the rollup's minutes summed into chart buckets.

A range has a fixed bucket size so every chart has 60 to 100 bars: 1 h in minutes, 24 h in
quarter hours, 7 d in two-hour buckets. The database sums the minutes (one row per
minute, whatever the number of queues and types); this module folds them into buckets
aligned to UTC multiples of the bucket size, so a bucket keeps its boundaries from one
refresh to the next. Reads `jobdesk_history_minutes` only — never the jobs or attempts,
so the cost is bounded by the range (at most 10,080 minutes), not by the queue's size.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.history.models import history_minutes
from jobdesk.shared.history.rollup import watermark
from jobdesk.shared.operator.filters import choice_param, name_param

_h = history_minutes.c
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


SPANS: dict[str, Span] = {
    "1h": Span("1h", timedelta(hours=1), timedelta(minutes=1), "%H:%M", 10),
    "24h": Span("24h", timedelta(hours=24), timedelta(minutes=15), "%H:%M", 16),
    "7d": Span("7d", timedelta(days=7), timedelta(hours=2), "%a %d", 12),
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


def read_history(conn: sa.Connection, filters: HistoryFilters, *, now: datetime) -> History:
    """The buckets of `filters.span` up to now (the newest bucket is still filling)."""
    span = SPANS[filters.span]
    end = _floor(now, span.step) + span.step
    start = end - span.length
    in_range = [_h.minute >= start, _h.minute < end]
    chosen = list(in_range)
    if filters.queue:
        chosen.append(_h.queue == filters.queue)
    if filters.job_type:
        chosen.append(_h.job_type == filters.job_type)
    per_minute = (
        sa.select(
            _h.minute,
            sa.func.sum(_h.processed).label("processed"),
            sa.func.sum(_h.failed).label("failed"),
            sa.func.sum(_h.dead).label("dead"),
            sa.func.sum(_h.waited).label("waited"),
            sa.func.sum(_h.wait_seconds_sum).label("wait_sum"),
            sa.func.max(_h.wait_seconds_max).label("wait_max"),
        )
        .where(*chosen)
        .group_by(_h.minute)
    )
    count = int(span.length / span.step)
    sums: list[list[Any]] = [[0, 0, 0, 0, 0.0, None] for _ in range(count)]
    for row in conn.execute(per_minute):
        index = int((row.minute - start) / span.step)
        if not 0 <= index < count:
            continue
        into = sums[index]
        into[0] += int(row.processed or 0)
        into[1] += int(row.failed or 0)
        into[2] += int(row.dead or 0)
        into[3] += int(row.waited or 0)
        into[4] += float(row.wait_sum or 0.0)
        if row.wait_max is not None:
            into[5] = float(row.wait_max) if into[5] is None else max(into[5], float(row.wait_max))
    buckets = [Bucket(start + span.step * i, *values) for i, values in enumerate(sums)]
    groups = conn.execute(
        sa.select(_h.queue, _h.job_type).where(*in_range).group_by(_h.queue, _h.job_type)
    ).all()
    return History(
        span=span,
        start=start,
        end=end,
        buckets=buckets,
        queues=sorted({queue for queue, _ in groups}),
        job_types=sorted({job_type for _, job_type in groups}),
        settled_before=watermark(conn)[1],
    )
