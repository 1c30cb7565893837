"""How many jobs a list's filters match — exact when that is cheap, else an estimate that
says so — and the names its queue and type menus offer.

- Filters of status, queue and type only, on PostgreSQL: the kept counts
  (`core.job_counts`), exact at any size.
- Otherwise the matching rows are counted up to `COUNT_CAP`: exact below it.
- Past the cap, PostgreSQL's planner estimate for the query (`EXPLAIN`): "about 1.2M";
  SQLite has no row estimates, so the list says "more than 10,000".
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import sqlalchemy as sa

from jobdesk.shared.core import job_counts
from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.published_types import list_published
from jobdesk.shared.core.queues import paused_queues
from jobdesk.shared.operator.filters import JobFilters
from jobdesk.shared.operator.queries.stats import counts_by_status_queue_type

#: Rows counted at most for an exact total (an index range of this many entries).
COUNT_CAP = 10_000
#: The filter fields the kept counts can answer (sort and page size change no count).
_COUNTED = frozenset({"status", "queue", "job_type", "time_field", "sort", "page_size"})


@dataclass(frozen=True, slots=True)
class Total:
    """`count` jobs; `exact` False: an estimate (`about`) or, when `at_least`, a floor."""

    count: int
    exact: bool = True
    at_least: bool = False


def _only_counted(filters: JobFilters) -> bool:
    empty = JobFilters(sort=filters.sort, page_size=filters.page_size)
    return all(
        getattr(filters, item.name) == getattr(empty, item.name)
        for item in fields(JobFilters)
        if item.name not in _COUNTED
    )


def matching_total(
    conn: sa.Connection, conditions: list[sa.ColumnElement[bool]], filters: JobFilters
) -> Total:
    """How many jobs `conditions` (the WHERE of `filters`) match; see the module."""
    if job_counts.maintained(conn) and _only_counted(filters) and filters.resolution is None:
        return Total(
            sum(
                row.count
                for row in counts_by_status_queue_type(conn)
                if filters.status in (None, row.status)
                and filters.queue in (None, row.queue)
                and filters.job_type in (None, row.job_type)
            )
        )
    capped = sa.select(jobs.c.id).where(*conditions).limit(COUNT_CAP + 1).subquery()
    counted = int(conn.execute(sa.select(sa.func.count()).select_from(capped)).scalar_one())
    if counted <= COUNT_CAP:
        return Total(counted)
    estimate = driver(conn).estimate_count(conn, sa.select(jobs.c.id).where(*conditions))
    if estimate is None:
        return Total(COUNT_CAP, exact=False, at_least=True)
    # The estimate is a guess; it must not contradict what was just counted.
    return Total(max(estimate, COUNT_CAP + 1), exact=False)


@dataclass(frozen=True, slots=True)
class FilterChoices:
    """What the list's menus offer: the queues and job types that exist."""

    queues: list[str]
    job_types: list[str]


def filter_choices(conn: sa.Connection, filters: JobFilters) -> FilterChoices:
    """Queues and types with jobs (the kept counts on PostgreSQL, an index-only scan on
    SQLite), paused queues and published types; a value the URL names is kept even when
    nothing has it any more, so the menu still shows what the list filters by."""
    counts = counts_by_status_queue_type(conn)
    queues = {row.queue for row in counts} | set(paused_queues(conn))
    types = {row.job_type for row in counts} | {t.job_type for t in list_published(conn)}
    if filters.queue:
        queues.add(filters.queue)
    if filters.job_type:
        types.add(filters.job_type)
    return FilterChoices(sorted(queues), sorted(types))


def describe(total: Total) -> str:
    """ "1,234 jobs", "about 1.2M jobs", "more than 10,000 jobs"."""
    if total.at_least:
        return f"more than {total.count:,} jobs"
    if total.exact:
        return f"{total.count:,} job" + ("" if total.count == 1 else "s")
    return f"about {_round(total.count)} jobs"


def _round(count: int) -> str:
    for size, suffix in ((1_000_000_000, "B"), (1_000_000, "M"), (1_000, "k")):
        if count >= size:
            return f"{count / size:.1f}".rstrip("0").rstrip(".") + suffix
    return f"{count:,}"
