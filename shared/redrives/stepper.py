"""One step of a redrive, and the leader's pass over every redrive at work.

A step (`redrive_step`), in one transaction with the redrive's row locked:

1. judge: read the first outcome of the new jobs still waiting for one
   (`rules.verdict`) and count them;
2. stop: a running redrive whose latest outcomes trip its stop rule ends `stopped`,
   saying what the rule saw (audited as `redrive.stop`);
3. requeue: as many as the pace allows (`rules.allowance`), in dead-job id order,
   through the triage retry (`decisions.requeue_dead`: the new job, the dead one
   resolved `requeued` by the redrive's operator, an audit row naming the redrive) —
   except while the first new jobs are on probation (`rules.on_probation`). A job
   someone decided on meanwhile (retried, fixed or ignored by hand) or whose type no
   worker runs is skipped, not counted against the pace;
4. finish: nothing left to requeue and every new job judged: `finished` (audited).

The row lock is what makes a step safe to run twice: a second leader's step (during a
hand-over) waits for the first one's commit, then reads the pace it left and finds
nothing due. A paused redrive is judged but neither stopped nor requeued.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core import audit
from jobdesk.shared.core.audit import AuditAction
from jobdesk.shared.core.decisions import requeue_dead
from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.models import job_attempts, jobs
from jobdesk.shared.core.states import JobStatus
from jobdesk.shared.core.worker_registry import runnable_types
from jobdesk.shared.redrives.commands import subject_of
from jobdesk.shared.redrives.models import (
    ACTIVE_STATES,
    Outcome,
    RedriveState,
    Skipped,
    redrive_items,
    redrives,
)
from jobdesk.shared.redrives.rules import (
    DECISIVE,
    StopRule,
    Tally,
    allowance,
    on_probation,
    paced,
    tripped,
    verdict,
)

log = logging.getLogger("jobdesk.redrives")

__all__ = ["SYSTEM_ACTOR", "StepResult", "active_redrive_ids", "redrive_step"]

#: Who the audit log names for what a redrive does by itself (stop, finish).
SYSTEM_ACTOR = "jobdesk"
#: New jobs judged per step (their first outcomes are read by index probe each).
JUDGE_BATCH = 1000
#: Items looked at per round of requeueing: the handled ones above the cursor that turn
#: out resolved by hand are passed over in bulk, not one step at a time.
SCAN_BATCH = 1000
#: Dead jobs per `requeue_dead` call (its statements carry one row per job).
REQUEUE_BATCH = 200
#: Rounds of requeueing per step: a round whose jobs were all skipped takes the next.
ROUNDS = 5


@dataclass(slots=True)
class StepResult:
    """What one step did to one redrive."""

    redrive_id: int
    state: str
    requeued: int = 0
    skipped: int = 0
    judged: dict[str, int] = field(default_factory=dict)


def active_redrive_ids(conn: sa.Connection) -> list[int]:
    """The redrives still at work (running or paused), oldest first."""
    query = (
        sa.select(redrives.c.id)
        .where(redrives.c.state.in_([state.value for state in ACTIVE_STATES]))
        .order_by(redrives.c.id)
    )
    return list(conn.execute(query).scalars())


def redrive_step(conn: sa.Connection, redrive_id: int, *, now: datetime) -> StepResult | None:
    """One step of redrive `redrive_id` in the caller's transaction (see the module);
    None when it is not running or paused (any more)."""
    query = sa.select(redrives).where(redrives.c.id == redrive_id)
    row = conn.execute(driver(conn).for_update(query)).first()
    if row is None or row.state not in {state.value for state in ACTIVE_STATES}:
        return None
    result = StepResult(redrive_id, row.state)
    result.judged = _judge(conn, redrive_id, now)
    tally = Tally(
        requeued=row.requeued,
        succeeded=row.succeeded + result.judged.get(Outcome.SUCCEEDED, 0),
        failed=row.failed + result.judged.get(Outcome.FAILED, 0),
        undecided=row.undecided
        + result.judged.get(Outcome.CANCELLED, 0)
        + result.judged.get(Outcome.GONE, 0),
    )
    values: dict[str, Any] = {
        "succeeded": tally.succeeded,
        "failed": tally.failed,
        "undecided": tally.undecided,
    }
    rule = StopRule(row.stop_failures, row.stop_window)
    running = row.state == RedriveState.RUNNING.value
    stop = _stop_reason(conn, redrive_id, rule, tally) if running else None
    if stop is not None:
        values.update(_ended(RedriveState.STOPPED, now, stopped_reason=stop))
        _audit(conn, redrive_id, AuditAction.REDRIVE_STOP, stop, tally, row.total, now)
        log.info(
            "redrive #%s stopped: %s",
            redrive_id,
            stop,
            extra={"action": "redrive_stopped", "redrive_id": redrive_id},
        )
    elif running and on_probation(rule, tally):
        # Held back: the time on probation is not saved up for a burst afterwards.
        values["next_at"] = max(row.next_at, paced(now, 1, row.rate_per_minute))
    elif running:
        pace = allowance(row.next_at, now, row.rate_per_minute)
        want = pace.due
        if tally.requeued < rule.window:
            # The first `window` new jobs are the stop rule's probation: never past it
            # in one step.
            want = min(want, rule.window - tally.requeued)
        moved = _requeue(conn, row, want, now) if want else _Moved(0, 0, row.cursor_job_id)
        result.requeued, result.skipped = moved.requeued, moved.skipped
        tally = Tally(
            tally.requeued + moved.requeued, tally.succeeded, tally.failed, tally.undecided
        )
        values.update(
            requeued=tally.requeued,
            skipped=row.skipped + moved.skipped,
            cursor_job_id=moved.cursor,
        )
        if moved.requeued == pace.due:
            values["next_at"] = paced(pace.start, pace.due, row.rate_per_minute)
        else:
            # Fewer than were due (the probation's cap, or nothing left to requeue): the
            # rest is not saved up for a burst later; the next one is due one interval on.
            values["next_at"] = paced(now, 1, row.rate_per_minute)
        left = row.total - tally.requeued - values["skipped"]
        if left == 0 and tally.awaiting == 0:
            values.update(_ended(RedriveState.FINISHED, now))
            _audit(conn, redrive_id, AuditAction.REDRIVE_FINISH, None, tally, row.total, now)
    conn.execute(sa.update(redrives).where(redrives.c.id == redrive_id).values(**values))
    result.state = str(values.get("state", row.state))
    return result


def _ended(state: RedriveState, now: datetime, **more: Any) -> dict[str, Any]:
    return {
        "state": state.value,
        "changed_by": SYSTEM_ACTOR,
        "changed_at": now,
        "change_reason": None,
        "finished_at": now,
        **more,
    }


def _audit(
    conn: sa.Connection,
    redrive_id: int,
    action: AuditAction,
    reason: str | None,
    tally: Tally,
    total: int,
    now: datetime,
) -> None:
    audit.record(
        conn,
        actor=SYSTEM_ACTOR,
        action=action,
        subject=subject_of(redrive_id),
        reason=reason,
        details={
            "jobs": total,
            "requeued": tally.requeued,
            "succeeded": tally.succeeded,
            "failed_again": tally.failed,
        },
        now=now,
    )


# --- judging the new jobs ---------------------------------------------------------------


def _first_decisive_outcome() -> sa.ScalarSelect[Any]:
    attempt = job_attempts.alias("first_attempt")
    return (
        sa.select(attempt.c.outcome)
        .where(
            attempt.c.job_id == redrive_items.c.new_job_id,
            attempt.c.outcome.in_(sorted(DECISIVE)),
        )
        .order_by(attempt.c.attempt)
        .limit(1)
        .scalar_subquery()
    )


def _judge(conn: sa.Connection, redrive_id: int, now: datetime) -> dict[str, int]:
    """Record the first outcome of the new jobs that now have one; counts by outcome."""
    awaiting = (
        sa.select(redrive_items.c.job_id, jobs.c.status, _first_decisive_outcome().label("first"))
        .select_from(redrive_items.outerjoin(jobs, jobs.c.id == redrive_items.c.new_job_id))
        .where(
            redrive_items.c.redrive_id == redrive_id,
            redrive_items.c.new_job_id.is_not(None),
            redrive_items.c.outcome.is_(None),
        )
        .order_by(redrive_items.c.job_id)
        .limit(JUDGE_BATCH)
    )
    judged: dict[Outcome, list[int]] = {}
    for row in conn.execute(awaiting):
        found = verdict(row.first, row.status)
        if found is not None:
            judged.setdefault(found, []).append(row.job_id)
    for outcome, ids in judged.items():
        conn.execute(
            sa.update(redrive_items)
            .where(redrive_items.c.redrive_id == redrive_id, redrive_items.c.job_id.in_(ids))
            .values(outcome=outcome.value, judged_at=now)
        )
    return {outcome.value: len(ids) for outcome, ids in judged.items()}


def _stop_reason(conn: sa.Connection, redrive_id: int, rule: StopRule, tally: Tally) -> str | None:
    """The stop rule on the latest `rule.window` decided outcomes (judged order)."""
    if tally.failed < rule.failures:
        return None  # not that many failures in all: no window can hold them
    latest = (
        sa.select(redrive_items.c.outcome)
        .where(
            redrive_items.c.redrive_id == redrive_id,
            redrive_items.c.judged_at.is_not(None),
            redrive_items.c.outcome.in_([Outcome.SUCCEEDED.value, Outcome.FAILED.value]),
        )
        .order_by(redrive_items.c.judged_at.desc(), redrive_items.c.job_id.desc())
        .limit(rule.window)
    )
    window = list(conn.execute(latest).scalars())
    failed = sum(1 for outcome in window if outcome == Outcome.FAILED.value)
    return tripped(rule, failed, len(window), tally.succeeded + tally.failed)


# --- requeueing -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Moved:
    requeued: int
    skipped: int
    cursor: int


def _requeue(conn: sa.Connection, redrive: Any, want: int, now: datetime) -> _Moved:
    """Requeue up to `want` of the redrive's next dead jobs (see the module)."""
    runnable = runnable_types(conn)
    requeued = skipped = 0
    cursor = int(redrive.cursor_job_id)
    for _ in range(ROUNDS):
        need = want - requeued
        if need <= 0:
            break
        upcoming = conn.execute(
            sa.select(redrive_items.c.job_id, jobs.c.job_type, jobs.c.status, jobs.c.resolution)
            .select_from(redrive_items.outerjoin(jobs, jobs.c.id == redrive_items.c.job_id))
            .where(redrive_items.c.redrive_id == redrive.id, redrive_items.c.job_id > cursor)
            .order_by(redrive_items.c.job_id)
            .limit(max(need, SCAN_BATCH))
        ).all()
        if not upcoming:
            break
        wanted, passed = _choose(upcoming, need, runnable)
        new_ids: dict[int, int] = {}
        unknown: set[int] = set()
        for start in range(0, len(wanted), REQUEUE_BATCH):
            done = requeue_dead(
                conn,
                wanted[start : start + REQUEUE_BATCH],
                actor=redrive.created_by,
                reason=redrive.reason,
                now=now,
                subject=subject_of(redrive.id),
                details={"redrive": redrive.id},
            )
            new_ids.update(done.new_ids)
            unknown.update(done.unknown_type)
        # A job resolved between the read and the retry (by hand, at that moment) is
        # skipped like one resolved before.
        for job_id in wanted:
            if job_id not in new_ids and job_id not in unknown:
                passed[Skipped.RESOLVED].append(job_id)
        passed[Skipped.UNKNOWN_TYPE].extend(unknown)
        _mark(conn, redrive.id, new_ids, passed, now)
        requeued += len(new_ids)
        skipped += sum(len(ids) for ids in passed.values())
        cursor = max([cursor, *new_ids, *(i for ids in passed.values() for i in ids)])
    return _Moved(requeued, skipped, cursor)


def _choose(
    upcoming: Sequence[Any], need: int, runnable: frozenset[str]
) -> tuple[list[int], dict[Skipped, list[int]]]:
    """The next `need` dead jobs still undecided and runnable, and those passed over on
    the way to them (why each was skipped)."""
    wanted: list[int] = []
    passed: dict[Skipped, list[int]] = {Skipped.RESOLVED: [], Skipped.UNKNOWN_TYPE: []}
    for item in upcoming:
        if len(wanted) == need:
            break
        if item.status != JobStatus.DEAD.value or item.resolution is not None:
            passed[Skipped.RESOLVED].append(item.job_id)
        elif item.job_type not in runnable:
            passed[Skipped.UNKNOWN_TYPE].append(item.job_id)
        else:
            wanted.append(item.job_id)
    return wanted, passed


def _mark(
    conn: sa.Connection,
    redrive_id: int,
    new_ids: dict[int, int],
    passed: dict[Skipped, list[int]],
    now: datetime,
) -> None:
    if new_ids:
        conn.execute(
            sa.update(redrive_items)
            .where(
                redrive_items.c.redrive_id == sa.bindparam("redrive"),
                redrive_items.c.job_id == sa.bindparam("dead"),
            )
            .values(new_job_id=sa.bindparam("new"), requeued_at=sa.bindparam("at")),
            [
                {"redrive": redrive_id, "dead": old, "new": new, "at": now}
                for old, new in new_ids.items()
            ],
        )
    for why, ids in passed.items():
        if ids:
            conn.execute(
                sa.update(redrive_items)
                .where(redrive_items.c.redrive_id == redrive_id, redrive_items.c.job_id.in_(ids))
                .values(skipped=why.value)
            )
