"""Why a job waits (R26): the holds on a queued or failed job, said in words.

A job that should run but does not is held by one of these, each read from where it
lives — nothing here is stored on the job itself:

- a paused queue (`jobdesk_queue_pauses`): the claim skips the queue;
- a paused or 410-disabled endpoint (`jobdesk_webhook_endpoints`): the webhook handler
  snoozes the delivery;
- an open circuit breaker (`jobdesk_circuit_breakers`, keyed `webhook:<name>` or
  `smtp:default`): the handler snoozes the job;
- a spent rate limit (`jobdesk_rate_limits`, the same keys or the job type's own):
  snoozed until the next token;
- a blocked group: a running or earlier job with the same `group_key` (the claim skips
  every member but the group's head);
- its time: `next_run_at` in the future (a backoff, a `run_at`, a snooze).

A quarantine (`jobdesk.shared.flow.holds`) is different: it parks its jobs as `waiting`
with `held_by` naming it, so the claim never sees them. `quarantines_for_jobs` names the
quarantine of each such job on a page of jobs; a job's own page says it through
`shared.workflows.queries.job_workflow`.

`holds_for_jobs` answers for a page of jobs with a fixed number of statements whatever
the page size (the job rows, then one lookup per kind for every job at once);
`holds_for_job` is the one-job case. Only `queued` and `failed` jobs wait.

`held_counts` is the overview's line ("12 jobs held: 8 by paused endpoint crm, 4 by
paused queue reports"). It must stay cheap at 10M jobs: queue pauses are answered from
the kept counts the caller already has, and the jobs behind a paused endpoint or an
open breaker are counted only when one exists, each with one bounded probe (see
`_ENDPOINT_COUNT`). Each active quarantine adds a bounded probe of
`ix_jobdesk_jobs_held_by` (`quarantine_counts`), and none runs while no hold is active.
`held_condition` is the same rule as a WHERE clause, for the jobs list's `held` filter,
so a count and the list behind its link agree; `quarantined_by` is the `held_by` filter's.

A job is counted under the first hold that stops it, in the order the worker meets
them: the queue's pause (nothing is claimed), then the endpoint's pause, then the
breaker (the webhook handler checks the pause first).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from enum import StrEnum
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.driver.types import UTCDateTime
from jobdesk.shared.core.models import WAITING_WEBHOOK_SQL, jobs, queue_pauses
from jobdesk.shared.core.queues import QueuePause, paused_queues
from jobdesk.shared.core.states import CLAIMABLE, JobStatus, sql_values
from jobdesk.shared.flow.holds import PREVIEW_COUNT_CAP, HoldRecord, record_of
from jobdesk.shared.flow.models import holds as quarantine_holds
from jobdesk.shared.limits.models import BreakerState, circuit_breakers, rate_limits
from jobdesk.shared.operator.filters import HOLD_FILTERS
from jobdesk.shared.operator.zones import local_text
from jobdesk.shared.webhooks.endpoints import WEBHOOK_JOB_TYPE
from jobdesk.shared.webhooks.models import webhook_endpoints

__all__ = [
    "HOLD_FILTERS",
    "HeldCount",
    "Hold",
    "HoldKind",
    "QuarantineCount",
    "held_condition",
    "held_counts",
    "holds_for_job",
    "holds_for_jobs",
    "quarantine_counts",
    "quarantined_by",
    "quarantines",
    "quarantines_for_jobs",
]

EMAIL_JOB_TYPE = "email.send"
#: The SMTP provider's breaker and rate-limit key (the worker's `PROVIDER_KEY`).
SMTP_KEY = "smtp:default"
#: The overview counts the jobs behind one paused endpoint or open breaker up to this
#: many; past it the line says "1,000+" instead of walking all of them.
COUNT_CAP = 1000
#: The jobs one quarantine holds are counted up to this many ("10,000+" past it): the
#: same bound as the preview that placed it, so the two numbers can be compared.
QUARANTINE_COUNT_CAP = PREVIEW_COUNT_CAP
#: The overview and the holds page probe at most this many active quarantines.
QUARANTINES_SHOWN = 100

_CLAIMABLE_VALUES = sql_values(CLAIMABLE)
_WAITING_BREAKER = (BreakerState.OPEN.value, BreakerState.HALF_OPEN.value)


class HoldKind(StrEnum):
    """What holds a job, in the order a worker meets them (a quarantined job is never
    claimed at all)."""

    QUARANTINE = "quarantine"
    QUEUE_PAUSED = "queue_paused"
    ENDPOINT_PAUSED = "endpoint_paused"
    BREAKER_OPEN = "breaker_open"
    RATE_LIMIT = "rate_limit"
    GROUP_BLOCKED = "group_blocked"
    SCHEDULED = "scheduled"


#: Holds a handler meets after the claim, snoozing the job until it re-checks.
_SNOOZING = frozenset({HoldKind.ENDPOINT_PAUSED, HoldKind.BREAKER_OPEN, HoldKind.RATE_LIMIT})


@dataclass(frozen=True, slots=True)
class Hold:
    """One reason a job waits. `name` is the queue, endpoint, breaker or rate-limit key
    it is about (a quarantine's target, "tenant:42"); `until` when the hold ends by
    itself (None: until someone acts); `by` who paused or placed it; `detail` the reason
    or context; `job_id` the blocking job; `hold_id` the quarantine."""

    kind: HoldKind
    name: str | None = None
    until: datetime | None = None
    by: str | None = None
    detail: str | None = None
    job_id: int | None = None
    hold_id: int | None = None

    def text(self, now: datetime, zone: tzinfo = UTC) -> str:
        """The whole line, e.g. "held: endpoint crm paused until 08:10 UTC — CRM
        maintenance" (times on the clock of `zone`, with the date when it is not
        today's there)."""
        until = f" until {clock(self.until, now, zone)}" if self.until else ""
        tail = f" — {self.detail}" if self.detail else ""
        if self.kind is HoldKind.QUARANTINE:
            end = f" (until {clock(self.until, now, zone)})" if self.until else ""
            return f"held: quarantine of {self.name} by {self.by}{tail}{end}"
        if self.kind is HoldKind.QUEUE_PAUSED:
            return f"held: queue {self.name} paused by {self.by}{tail}"
        if self.kind is HoldKind.ENDPOINT_PAUSED:
            return f"held: endpoint {self.name} paused{until}{tail}"
        if self.kind is HoldKind.BREAKER_OPEN:
            return f"held: breaker for {breaker_target(self.name or '')} open{until}{tail}"
        if self.kind is HoldKind.RATE_LIMIT:
            return f"waiting: rate limit {self.name} (next try {clock(self.until, now, zone)})"
        if self.kind is HoldKind.GROUP_BLOCKED:
            return f"blocked by job #{self.job_id} (group {self.name})"
        note = f" ({self.detail})" if self.detail else ""
        return f"scheduled: runs at {clock(self.until, now, zone)}{note}"


def clock(moment: datetime | None, now: datetime, zone: tzinfo = UTC) -> str:
    """`08:10 UTC` (`09:10 CET` in Europe/Berlin), or `2026-12-02 08:10 UTC` when not on
    today's date in `zone`."""
    if moment is None:
        return "—"
    return local_text(moment, zone, now=now, seconds=False)


def breaker_target(key: str) -> str:
    """What a breaker guards, as people name it: `crm` for `webhook:crm`."""
    return key.removeprefix("webhook:")


# --- one job, a page of jobs ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Waiting:
    """The columns of a waiting job the holds depend on (never its payload: only the
    endpoint name of a webhook delivery)."""

    id: int
    status: str
    queue: str
    job_type: str
    group_key: str | None
    next_run_at: datetime
    started_at: datetime | None
    attempts: int
    max_attempts: int
    endpoint: str | None

    @property
    def breaker_key(self) -> str | None:
        if self.job_type == WEBHOOK_JOB_TYPE and self.endpoint:
            return f"webhook:{self.endpoint}"
        if self.job_type == EMAIL_JOB_TYPE:
            return SMTP_KEY
        return None

    @property
    def rate_keys(self) -> tuple[str, ...]:
        """The destination's limit and a type-level limit (`@job(rate_limit=…)` draws
        on a bucket named after the type)."""
        own = self.breaker_key
        return (own, self.job_type) if own else (self.job_type,)


def _waiting_jobs(conn: sa.Connection, ids: Sequence[int]) -> list[_Waiting]:
    query = sa.select(
        jobs.c.id,
        jobs.c.status,
        jobs.c.queue,
        jobs.c.job_type,
        jobs.c.group_key,
        jobs.c.next_run_at,
        jobs.c.started_at,
        jobs.c.attempts,
        jobs.c.max_attempts,
        _endpoint_of_delivery(conn).label("endpoint"),
    ).where(jobs.c.id.in_(ids), jobs.c.status.in_(_CLAIMABLE_VALUES))
    found = []
    for row in conn.execute(query):
        endpoint = row.endpoint if isinstance(row.endpoint, str) else None
        found.append(_Waiting(*row[:9], endpoint=endpoint))
    return found


@dataclass(frozen=True, slots=True)
class _EndpointPause:
    name: str
    until: datetime | None
    reason: str | None
    disabled: str | None


def _paused_endpoints(
    conn: sa.Connection, now: datetime, names: Iterable[str] | None = None
) -> dict[str, _EndpointPause]:
    """Endpoints paused right now (a pause whose `paused_until` passed no longer holds)."""
    ep = webhook_endpoints.c
    query = sa.select(ep.name, ep.paused_until, ep.paused_reason, ep.disabled_reason).where(
        ep.paused.is_(sa.true()), sa.or_(ep.paused_until.is_(None), ep.paused_until > now)
    )
    if names is not None:
        wanted = sorted(set(names))
        if not wanted:
            return {}
        query = query.where(ep.name.in_(wanted))
    return {row.name: _EndpointPause(*row) for row in conn.execute(query)}


@dataclass(frozen=True, slots=True)
class _Breaker:
    key: str
    state: str
    retry_at: datetime | None
    last_error: str | None


def _open_breakers(conn: sa.Connection, keys: Iterable[str] | None = None) -> dict[str, _Breaker]:
    bc = circuit_breakers.c
    query = sa.select(bc.key, bc.state, bc.retry_at, bc.last_error).where(
        bc.state.in_(_WAITING_BREAKER)
    )
    if keys is not None:
        wanted = sorted(set(keys))
        if not wanted:
            return {}
        query = query.where(bc.key.in_(wanted))
    return {row.key: _Breaker(*row) for row in conn.execute(query)}


def _empty_buckets(conn: sa.Connection, keys: Iterable[str]) -> set[str]:
    """Rate-limit buckets left without a whole token by their last draw."""
    wanted = sorted(set(keys))
    if not wanted:
        return set()
    rl = rate_limits.c
    query = sa.select(rl.key).where(rl.key.in_(wanted), rl.tokens < 1)
    return set(conn.execute(query).scalars())


# The group rule of the claim: a running member blocks the group; otherwise the first
# active member in (priority, id) order is the head and every other member waits for it
# (a retrying head keeps its place). Both are probes of partial indexes, one pair per
# distinct group on the page: `uq_jobdesk_jobs_running_group_key` and
# `ix_jobdesk_jobs_active_group`, their predicates written as in the model (unqualified,
# they bind to the innermost table; SQLite uses a partial index only for the same terms).
_GROUP_BLOCKERS = sa.text(
    """
    SELECT g.group_key,
           (SELECT id FROM jobdesk_jobs
             WHERE status = 'running' AND group_key IS NOT NULL
               AND group_key = g.group_key) AS running_id,
           (SELECT id FROM jobdesk_jobs
             WHERE group_key IS NOT NULL AND status IN ('queued', 'running', 'failed')
               AND group_key = g.group_key
             ORDER BY priority, id LIMIT 1) AS head_id
      FROM (SELECT DISTINCT group_key FROM jobdesk_jobs
             WHERE id IN :ids AND group_key IS NOT NULL) AS g
    """
).bindparams(sa.bindparam("ids", expanding=True))


def _group_blockers(
    conn: sa.Connection, waiting: Sequence[_Waiting]
) -> dict[str, tuple[int | None, int | None]]:
    ids = [job.id for job in waiting if job.group_key is not None]
    if not ids:
        return {}
    return {row[0]: (row[1], row[2]) for row in conn.execute(_GROUP_BLOCKERS, {"ids": ids})}


def holds_for_jobs(
    conn: sa.Connection, ids: Iterable[int], *, now: datetime
) -> dict[int, list[Hold]]:
    """The holds of each waiting job among `ids`, in the order the worker meets them.

    At most six statements for any number of ids (jobs, queue pauses, endpoints,
    breakers, rate-limit buckets, group heads); a job that is not queued or failed, or
    waits for nothing but a worker, is left out.
    """
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    waiting = _waiting_jobs(conn, wanted)
    if not waiting:
        return {}
    queues = paused_queues(conn)
    endpoints = _paused_endpoints(conn, now, (j.endpoint for j in waiting if j.endpoint))
    breakers = _open_breakers(conn, (j.breaker_key for j in waiting if j.breaker_key))
    empty = _empty_buckets(conn, (key for j in waiting for key in j.rate_keys))
    groups = _group_blockers(conn, waiting)
    found: dict[int, list[Hold]] = {}
    for job in waiting:
        holds = _holds(job, now, queues, endpoints, breakers, empty, groups)
        if holds:
            found[job.id] = holds
    return found


def holds_for_job(conn: sa.Connection, job_id: int, *, now: datetime) -> list[Hold]:
    """Why job `job_id` waits (empty: it is not waiting, or only for a worker)."""
    return holds_for_jobs(conn, [job_id], now=now).get(job_id, [])


def _holds(
    job: _Waiting,
    now: datetime,
    queues: Mapping[str, QueuePause],
    endpoints: Mapping[str, _EndpointPause],
    breakers: Mapping[str, _Breaker],
    empty: set[str],
    groups: Mapping[str, tuple[int | None, int | None]],
) -> list[Hold]:
    holds: list[Hold] = []
    pause = queues.get(job.queue)
    if pause is not None:
        holds.append(
            Hold(HoldKind.QUEUE_PAUSED, job.queue, by=pause.paused_by, detail=pause.reason)
        )
    endpoint = endpoints.get(job.endpoint or "")
    if endpoint is not None:
        detail = f"disabled: {endpoint.disabled}" if endpoint.disabled else endpoint.reason
        holds.append(Hold(HoldKind.ENDPOINT_PAUSED, endpoint.name, endpoint.until, detail=detail))
    breaker = breakers.get(job.breaker_key or "")
    if breaker is not None:
        if breaker.state == BreakerState.HALF_OPEN:
            detail = "half-open: one probe is testing it"
        elif breaker.retry_at is None:
            detail = "opened by hand, until someone closes it"
        else:
            detail = breaker.last_error
        holds.append(Hold(HoldKind.BREAKER_OPEN, breaker.key, breaker.retry_at, detail=detail))
    due = job.next_run_at <= now
    # A snooze leaves `started_at` set and a `queued` job not yet due: handed back by a
    # worker. With the destination's bucket empty, that was (most likely) the limit.
    snoozed = job.status == JobStatus.QUEUED and job.started_at is not None and not due
    limited = next((key for key in job.rate_keys if key in empty), None)
    if snoozed and limited is not None:
        holds.append(Hold(HoldKind.RATE_LIMIT, limited, job.next_run_at))
    if job.group_key is not None:
        running_id, head_id = groups.get(job.group_key, (None, None))
        blocker = running_id if running_id not in (None, job.id) else head_id
        if blocker is not None and blocker != job.id:
            holds.append(Hold(HoldKind.GROUP_BLOCKED, job.group_key, job_id=blocker))
    if not due:
        # A snooze the holds above explain is not a second reason to mention.
        explained = snoozed and any(hold.kind in _SNOOZING for hold in holds)
        if job.status == JobStatus.FAILED:
            detail = f"attempt {job.attempts + 1} of {job.max_attempts}, after backoff"
            holds.append(Hold(HoldKind.SCHEDULED, until=job.next_run_at, detail=detail))
        elif not explained:
            detail = "snoozed by its handler" if snoozed else None
            holds.append(Hold(HoldKind.SCHEDULED, until=job.next_run_at, detail=detail))
    return holds


# --- the overview's count and the jobs list's filter ---------------------------------


@dataclass(frozen=True, slots=True)
class HeldCount:
    """How many waiting jobs one hold stops. `capped`: there are more than `count`
    (the probe stopped at `COUNT_CAP`)."""

    kind: HoldKind
    name: str
    count: int
    capped: bool = False
    #: The quarantine's id (`HoldKind.QUARANTINE` only).
    hold_id: int | None = None

    @property
    def filter_args(self) -> dict[str, str]:
        """The jobs list's query arguments for exactly these jobs."""
        if self.kind is HoldKind.QUARANTINE:
            return {"held_by": str(self.hold_id)}
        if self.kind is HoldKind.QUEUE_PAUSED:
            return {"queue": self.name, "held": "queue"}
        if self.kind is HoldKind.ENDPOINT_PAUSED:
            return {"webhook": self.name, "held": "endpoint"}
        if self.name == SMTP_KEY:
            return {"type": EMAIL_JOB_TYPE, "held": "breaker"}
        return {"webhook": breaker_target(self.name), "held": "breaker"}


def endpoint_name(conn: sa.Connection) -> sa.ColumnElement[str]:
    """A job's `payload.endpoint` in SQL. PostgreSQL: written as the probe index
    `ix_jobdesk_jobs_waiting_endpoint` has it, so the planner can use it. SQLite: NULL
    for a stored payload that is not JSON (a plain-SQL row) instead of an error."""
    return driver(conn).payload_text("endpoint")


def _endpoint_of_delivery(conn: sa.Connection) -> sa.ColumnElement[Any]:
    return sa.case((jobs.c.job_type == WEBHOOK_JOB_TYPE, endpoint_name(conn)), else_=None)


# The jobs behind one paused endpoint or open breaker: a walk of the probe index's
# entries for that endpoint (only waiting deliveries are in it), stopped after
# `COUNT_CAP + 1`, so the overview's cost does not grow with the backlog (EXPLAIN at
# 2M jobs, 19,200 held: an index scan of 1,001 rows, 14 ms). The index is (endpoint,
# id), so the list behind the link walks it backwards too (`ORDER BY id DESC LIMIT`:
# 0.1 ms, where the endpoint alone fetched and sorted all 19,200 in 105 ms). Jobs of a
# paused queue are counted under the queue (the claim never reaches the endpoint).
_ENDPOINT_COUNT = """
SELECT count(*) FROM (
    SELECT 1 FROM jobdesk_jobs
     WHERE {waiting} AND {endpoint} = :name
       AND queue NOT IN (SELECT queue FROM jobdesk_queue_pauses)
     LIMIT :cap) AS held
"""


def _count_endpoint(conn: sa.Connection, name: str) -> tuple[int, bool]:
    endpoint = driver(conn).payload_text_sql("endpoint")
    statement = _ENDPOINT_COUNT.format(waiting=WAITING_WEBHOOK_SQL, endpoint=endpoint)
    found = int(conn.execute(sa.text(statement), {"name": name, "cap": COUNT_CAP + 1}).scalar_one())
    return min(found, COUNT_CAP), found > COUNT_CAP


def held_counts(
    conn: sa.Connection, *, now: datetime, waiting: Mapping[tuple[str, str], int]
) -> list[HeldCount]:
    """The waiting jobs each queue pause, endpoint pause and open breaker holds, then
    the jobs each active quarantine holds (`quarantine_counts`).

    `waiting`: the queued + failed counts by (queue, job type), as the overview already
    has them from the kept counts — so a queue pause costs no query, and the probes for
    endpoints and breakers run only while one is paused or open (and some webhook or
    email job waits at all).
    """
    queues = paused_queues(conn)
    found: list[HeldCount] = []
    for queue in sorted(queues):
        count = sum(n for (name, _), n in waiting.items() if name == queue)
        if count:
            found.append(HeldCount(HoldKind.QUEUE_PAUSED, queue, count))

    def outside_paused(job_type: str) -> int:
        return sum(
            n for (queue, kind), n in waiting.items() if kind == job_type and queue not in queues
        )

    webhooks = outside_paused(WEBHOOK_JOB_TYPE)
    endpoints = _paused_endpoints(conn, now) if webhooks else {}
    for name in sorted(endpoints):
        count, capped = _count_endpoint(conn, name)
        if count:
            found.append(HeldCount(HoldKind.ENDPOINT_PAUSED, name, count, capped))
    for key in sorted(_open_breakers(conn)):
        if key == SMTP_KEY:
            count, capped = outside_paused(EMAIL_JOB_TYPE), False
        elif key.startswith("webhook:") and webhooks and breaker_target(key) not in endpoints:
            count, capped = _count_endpoint(conn, breaker_target(key))
        else:
            continue
        if count:
            found.append(HeldCount(HoldKind.BREAKER_OPEN, key, count, capped))
    found.extend(quarantine_counts(conn))
    return found


def held_condition(conn: sa.Connection, kind: str, *, now: datetime) -> sa.ColumnElement[bool]:
    """The jobs list's `held` filter: waiting jobs a queue pause, an endpoint pause or an
    open breaker holds (`any`), or one of them, attributed as `held_counts` does."""
    if kind not in HOLD_FILTERS:
        raise ValueError(f"not a hold filter: {kind!r}")
    ep, bc = webhook_endpoints.c, circuit_breakers.c
    waiting = jobs.c.status.in_(_CLAIMABLE_VALUES)
    in_paused_queue = jobs.c.queue.in_(sa.select(queue_pauses.c.queue))
    endpoint = endpoint_name(conn)
    paused = sa.select(ep.name).where(
        ep.paused.is_(sa.true()),
        sa.or_(ep.paused_until.is_(None), ep.paused_until > sa.literal(now, UTCDateTime())),
    )
    open_keys = sa.select(bc.key).where(bc.state.in_(_WAITING_BREAKER))
    webhook = jobs.c.job_type == WEBHOOK_JOB_TYPE
    by_endpoint = sa.and_(webhook, endpoint.in_(paused))
    by_breaker = sa.or_(
        sa.and_(
            webhook,
            (sa.literal("webhook:", sa.String()) + endpoint).in_(open_keys),
            sa.not_(endpoint.in_(paused)),
        ),
        sa.and_(jobs.c.job_type == EMAIL_JOB_TYPE, sa.literal(SMTP_KEY).in_(open_keys)),
    )
    if kind == "queue":
        return sa.and_(waiting, in_paused_queue)
    if kind == "endpoint":
        return sa.and_(waiting, sa.not_(in_paused_queue), by_endpoint)
    if kind == "breaker":
        return sa.and_(waiting, sa.not_(in_paused_queue), by_breaker)
    return sa.and_(waiting, sa.or_(in_paused_queue, by_endpoint, by_breaker))


# --- quarantines ---------------------------------------------------------------------


def quarantined_by(hold_id: int) -> sa.ColumnElement[bool]:
    """The jobs quarantine `hold_id` holds now (the jobs list's `held_by` filter): those
    `waiting` with `held_by` naming it — a held job cancelled meanwhile keeps `held_by`
    but is held no more. Served by `ix_jobdesk_jobs_held_by` (held_by, id), newest first
    too."""
    return sa.and_(jobs.c.held_by == hold_id, jobs.c.status == JobStatus.WAITING.value)


def _count_quarantined(conn: sa.Connection, hold_id: int) -> tuple[int, bool]:
    """How many jobs one quarantine holds, walking at most `QUARANTINE_COUNT_CAP + 1`
    index entries (a runaway tenant's million jobs cost the same as ten thousand)."""
    cap = QUARANTINE_COUNT_CAP
    probe = sa.select(jobs.c.id).where(quarantined_by(hold_id)).limit(cap + 1).subquery()
    found = int(conn.execute(sa.select(sa.func.count()).select_from(probe)).scalar_one())
    return min(found, cap), found > cap


@dataclass(frozen=True, slots=True)
class QuarantineCount:
    """A quarantine as the holds page lists it: the stored hold, its `held` the jobs it
    holds now, counted up to `QUARANTINE_COUNT_CAP` (`capped`: at least that many)."""

    hold: HoldRecord
    capped: bool = False

    def count_text(self) -> str:
        return f"{self.hold.held:,}+" if self.capped else f"{self.hold.held:,}"


def quarantines(
    conn: sa.Connection, *, active: bool, limit: int = QUARANTINES_SHOWN
) -> list[QuarantineCount]:
    """Quarantines, newest first: the active ones with the jobs each holds now (one
    bounded probe each), or the released ones (a release lets every job go: no probe)."""
    h = quarantine_holds.c
    query = (
        sa.select(quarantine_holds)
        .where(h.released_at.is_(None) if active else h.released_at.is_not(None))
        .order_by(h.id.desc())
        .limit(limit)
    )
    found = []
    for row in conn.execute(query).all():
        held, capped = _count_quarantined(conn, row.id) if active else (0, False)
        found.append(QuarantineCount(record_of(row, held=held), capped))
    return found


def quarantine_counts(conn: sa.Connection) -> list[HeldCount]:
    """The overview's part for quarantines: the jobs each active one holds now (one
    query of the small active-holds index, then a bounded probe per hold — none while
    no hold is active)."""
    return [
        HeldCount(HoldKind.QUARANTINE, q.hold.target.describe(), q.hold.held, q.capped, q.hold.id)
        for q in quarantines(conn, active=True)
        if q.hold.held
    ]


def quarantines_for_jobs(conn: sa.Connection, ids: Iterable[int]) -> dict[int, Hold]:
    """The quarantine holding each `waiting` job among `ids` (the jobs list's line under
    the status), in two statements whatever the number of ids; jobs no quarantine holds
    are left out."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    held = conn.execute(
        sa.select(jobs.c.id, jobs.c.held_by).where(
            jobs.c.id.in_(wanted),
            jobs.c.status == JobStatus.WAITING.value,
            jobs.c.held_by.is_not(None),
        )
    ).all()
    if not held:
        return {}
    h = quarantine_holds.c
    stored = {
        row.id: row
        for row in conn.execute(
            sa.select(quarantine_holds).where(h.id.in_(sorted({row.held_by for row in held})))
        )
    }
    found: dict[int, Hold] = {}
    for job_id, hold_id in held:
        row = stored.get(hold_id)
        if row is not None:
            found[job_id] = Hold(
                HoldKind.QUARANTINE,
                record_of(row).target.describe(),
                row.until,
                by=row.created_by,
                detail=row.reason,
                hold_id=row.id,
            )
    return found
