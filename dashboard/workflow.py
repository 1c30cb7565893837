"""A waiting job's "why is this job waiting" line: the words
`shared.workflows.queries.job_workflow` says, and the page where the wait can be ended.

A job a quarantine holds leads to that hold on the holds page (where it is released). A
job waiting for a slot of its concurrency key leads to the key's panel on its page. A
batch callback leads to its batch (the children it waits for, the retry of the dead
ones); a job enqueued `after=` others to the dependency that holds it — the dead or
cancelled one first, the one still running — or to its list of dependencies when it
waits for several.
"""

from __future__ import annotations

from dataclasses import dataclass

from flask import url_for

from jobdesk.shared.core.states import JobStatus
from jobdesk.shared.workflows.queries import JobWorkflow

#: Where a job's page lists what it waits for.
DEPENDENCIES_ANCHOR = "#dependencies"
#: Where a job's page shows its concurrency key's slots.
CONCURRENCY_ANCHOR = "#concurrency"


@dataclass(frozen=True, slots=True)
class WaitingLine:
    text: str
    href: str


def waiting_line(workflow: JobWorkflow) -> WaitingLine | None:
    """The line for a `waiting` job (None for any other)."""
    if workflow.waiting_reason is None:
        return None
    return WaitingLine(workflow.waiting_reason, _target(workflow))


def _target(workflow: JobWorkflow) -> str:
    if workflow.hold is not None:
        return url_for("jobdesk.holds.index", _anchor=f"hold-{workflow.hold.id}")
    if workflow.slots is not None:
        return CONCURRENCY_ANCHOR
    if workflow.callback_of is not None and workflow.batch is not None:
        return url_for("jobdesk.batches.detail", batch_id=workflow.batch.id)
    deps = workflow.dependencies
    stuck = [
        dep
        for dep in deps
        if (dep["status"] == JobStatus.DEAD.value and dep["resolution"] is None)
        or dep["status"] == JobStatus.CANCELLED.value
    ]
    pending = [dep for dep in deps if dep["status"] not in (JobStatus.SUCCEEDED.value, None)]
    holding = stuck or (pending if len(pending) == 1 else [])
    if holding:
        return url_for("jobdesk.jobs.detail", job_id=holding[0]["id"])
    return DEPENDENCIES_ANCHOR
