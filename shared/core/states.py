"""The job lifecycle: every state name, the named groups of states and the allowed moves.

This module is the single owner of state names. Everything else imports the
`JobStatus` members and the named groups below instead of retyping lists of strings,
so adding or renaming a state is a change in one place.
"""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    """Where a job is in its life. Each docstring says who moves jobs *out* of the state."""

    QUEUED = "queued"
    """Waiting for its `next_run_at`. Moved out by a worker's claim or an operator's cancel."""

    RUNNING = "running"
    """Claimed by a worker under a lease. Moved out by that worker (complete, fail, snooze,
    release, or stop after an operator's cancel request) or, when the lease expires, by the
    reaper."""

    SUCCEEDED = "succeeded"
    """Final. Only the pruner removes it, after the retention period."""

    FAILED = "failed"
    """An attempt failed and another will run at `next_run_at`. Moved out by a worker's claim
    or an operator's cancel."""

    DEAD = "dead"
    """Final: no more tries, a human decides. Never changes state again; triage writes a
    resolution on it and retries create a new job. Only the pruner removes resolved ones."""

    CANCELLED = "cancelled"
    """Final: an operator stopped it — before it ran again, or while it ran (its worker
    stopped the handler). Only the pruner removes it."""

    WAITING = "waiting"
    """Held back until something else happened: the jobs it was enqueued `after=` all
    succeeded (`waiting_for` counts those still missing), or — a batch callback — its
    batch's children are all final or all succeeded. Moved out by the database in the
    transaction of that last outcome (to `queued`; `jobdesk.shared.workflows.settle`) or
    by an operator's cancel (also when a dependency is ignored or cancelled)."""


class Resolution(StrEnum):
    """What an operator decided about a dead job (written on the dead row, never a state)."""

    REQUEUED = "requeued"
    FIXED = "fixed"
    IGNORED = "ignored"


class AttemptOutcome(StrEnum):
    """How one attempt ended, as recorded in `job_attempts`."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMEOUT = "timeout"
    LOST = "lost"
    """The worker holding the lease vanished; the reaper recorded the attempt."""
    PERMANENT = "permanent"
    """A permanent error sent the job to `dead` at once."""
    RELEASED = "released"
    """Handed back without running to the end (shutdown, rate limit, open breaker)."""
    CANCELLED = "cancelled"
    """An operator asked to cancel the running job and the attempt ended with it: the
    handler stopped on `ctx.cancelled`, was stopped hard after the grace, failed, or its
    worker was lost."""


#: States a worker may claim from (subject to `next_run_at`).
CLAIMABLE: frozenset[JobStatus] = frozenset({JobStatus.QUEUED, JobStatus.FAILED})
#: States of a job in its queue that will still run or is running (the group key's order
#: is among these; a `waiting` job joins them when it is released).
ACTIVE: frozenset[JobStatus] = frozenset({JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.FAILED})
#: States nothing moves a job out of.
FINAL: frozenset[JobStatus] = frozenset({JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED})
#: States an operator can cancel from at once.
CANCELLABLE: frozenset[JobStatus] = frozenset(
    {JobStatus.QUEUED, JobStatus.FAILED, JobStatus.WAITING}
)
#: States an operator can ask to stop: the job's worker ends it `cancelled`.
STOPPABLE: frozenset[JobStatus] = frozenset({JobStatus.RUNNING})
#: Everything an operator's cancel applies to, at once or through the worker.
CANCEL_TARGETS: frozenset[JobStatus] = CANCELLABLE | STOPPABLE
#: States that need a human decision.
TRIAGEABLE: frozenset[JobStatus] = frozenset({JobStatus.DEAD})

ALL_STATUSES: tuple[JobStatus, ...] = tuple(JobStatus)

#: The only moves the system makes. `apply`-style writers check against this table and a
#: test asserts every transition function stays inside it.
ALLOWED_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    # ... or back to `waiting`: over its key's slots, or held by a quarantine
    JobStatus.QUEUED: frozenset({JobStatus.RUNNING, JobStatus.CANCELLED, JobStatus.WAITING}),
    # a retry a quarantine holds waits, its attempts kept
    JobStatus.FAILED: frozenset({JobStatus.RUNNING, JobStatus.CANCELLED, JobStatus.WAITING}),
    JobStatus.RUNNING: frozenset(
        {
            JobStatus.SUCCEEDED,
            JobStatus.FAILED,
            JobStatus.DEAD,
            # snooze / release hand the job back without a failure
            JobStatus.QUEUED,
            # an operator's cancel request, carried out by the worker or the reaper
            JobStatus.CANCELLED,
        }
    ),
    # the last dependency succeeded / the batch completed / a slot freed / a hold was
    # released, or an operator's cancel
    JobStatus.WAITING: frozenset({JobStatus.QUEUED, JobStatus.CANCELLED}),
    JobStatus.SUCCEEDED: frozenset(),
    JobStatus.DEAD: frozenset(),
    JobStatus.CANCELLED: frozenset(),
}


_Q, _R, _F, _S, _D, _C, _W = (
    JobStatus.QUEUED,
    JobStatus.RUNNING,
    JobStatus.FAILED,
    JobStatus.SUCCEEDED,
    JobStatus.DEAD,
    JobStatus.CANCELLED,
    JobStatus.WAITING,
)

#: Every write of the core that moves jobs, by function name → (from-states, to-states):
#: the worker's (`claim`, `transitions.*`) and the operator's (`decisions.cancel`). A test
#: checks each pair against `ALLOWED_TRANSITIONS` and that no write is missing here.
TRANSITIONS: dict[str, tuple[frozenset[JobStatus], frozenset[JobStatus]]] = {
    "claim": (frozenset({_Q, _F}), frozenset({_R})),
    "complete": (frozenset({_R}), frozenset({_S})),
    "complete_many": (frozenset({_R}), frozenset({_S})),
    # A job with a cancel request ends `cancelled` whichever way its attempt ends,
    # except a success (the work was done): fail, snooze and the reaper honour it too.
    "fail": (frozenset({_R}), frozenset({_F, _D, _C})),
    "fail_many": (frozenset({_R}), frozenset({_F, _D, _C})),
    "bury_undecodable": (frozenset({_R}), frozenset({_D, _C})),
    "snooze": (frozenset({_R}), frozenset({_Q, _C})),
    "hand_back": (frozenset({_R}), frozenset({_Q, _C})),
    "hand_back_many": (frozenset({_R}), frozenset({_Q, _C})),
    "rescue_expired": (frozenset({_R}), frozenset({_F, _D, _C})),
    "rescue_held": (frozenset({_R}), frozenset({_F, _D, _C})),
    "stop_cancelled": (STOPPABLE, frozenset({_C})),
    "cancel": (CANCELLABLE, frozenset({_C})),
    # A parked cancel request (its row was locked) applied by the reaper: a job back in
    # the queue by then is cancelled; a running one only gets the request (kept state).
    "apply_cancel_requests": (CANCELLABLE, frozenset({_C})),
}

#: The flow-control writes of the driver, by method name: a quarantine placed
#: (`jobdesk.shared.flow.holds`) parks what could run (a job already waiting for a slot
#: stays `waiting`, now held); released, it lets its jobs go (the triggers park again
#: what a key's slots or another hold still stop).
FLOW_TRANSITIONS: dict[str, tuple[frozenset[JobStatus], frozenset[JobStatus]]] = {
    "hold_jobs": (frozenset({_Q, _F}), frozenset({_W})),
    "release_held": (frozenset({_W}), frozenset({_Q})),
}

#: The moves the database makes itself, by trigger name: `jobdesk.shared.workflows.settle`
#: releases a waiting job in the transaction of the outcome that completes its batch or
#: its last dependency; the slot and hold triggers park and release jobs.
DATABASE_TRANSITIONS: dict[str, tuple[frozenset[JobStatus], frozenset[JobStatus]]] = {
    "jobdesk_settle": (frozenset({_W}), frozenset({_Q})),
    # A key's slots (`jobdesk.shared.flow.concurrency`): a job over the cap waits, the
    # next waiting one takes a freed slot.
    "jobdesk_slots (over the cap)": (frozenset({_Q}), frozenset({_W})),
    "jobdesk_slots (a slot freed)": (frozenset({_W}), frozenset({_Q})),
    # Quarantine holds (`jobdesk.shared.flow.holds`): a job that could run and matches
    # an active hold waits (one waiting for a slot stays `waiting`, now held).
    "jobdesk_holds": (frozenset({_Q, _F}), frozenset({_W})),
}

#: Writes that leave a job in its state, by function name → the states they apply to:
#: lease renewal and progress while running (fenced by the lease token), an operator's
#: cancel request on a running job (its worker carries it out), and the decisions
#: written ON dead jobs (a retry creates a new `queued` job instead).
STATE_KEEPING_WRITES: dict[str, frozenset[JobStatus]] = {
    "extend_lease": frozenset({_R}),
    "record_progress": frozenset({_R}),
    "request_cancel": STOPPABLE,
    "resolve_dead": frozenset({_D}),
    "requeue_dead": frozenset({_D}),
    "ignore_dead": frozenset({_D}),
}


def is_allowed(source: JobStatus, target: JobStatus) -> bool:
    """True when the lifecycle permits moving a job from `source` to `target`."""
    return target in ALLOWED_TRANSITIONS[source]


def sql_values(group: frozenset[JobStatus]) -> list[str]:
    """The group's members as plain strings, sorted so generated SQL is stable."""
    return sorted(str(status) for status in group)
