"""SQL the two drivers share for the jobs table: the claim's candidate test and the
columns a claim sets and returns, written once and spliced into each dialect's claim.

The claim repeats the partial indexes' predicates verbatim (unqualified: they bind to
the innermost `jobs`): SQLite uses a partial index only for a query whose WHERE has the
very same term — `status IN ('failed', 'queued')` does not imply an index on
`status IN ('queued', 'failed')`. A test checks they still name the intended states.
"""

from __future__ import annotations

from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.states import AttemptOutcome, JobStatus


def index_predicate(name: str) -> str:
    """The WHERE of one of the `jobs` partial indexes, as written in the model."""
    (index,) = (i for i in jobs.indexes if i.name == name)
    return str(index.dialect_options["sqlite"]["where"])


CLAIMABLE_SQL = index_predicate("ix_jobdesk_jobs_claimable_any_queue")
ACTIVE_GROUP_SQL = index_predicate("ix_jobdesk_jobs_active_group")
RUNNING = JobStatus.RUNNING.value
SUCCEEDED = JobStatus.SUCCEEDED.value
QUEUED = JobStatus.QUEUED.value
FAILED = JobStatus.FAILED.value
DEAD = JobStatus.DEAD.value
CANCELLED = JobStatus.CANCELLED.value
CANCELLED_OUTCOME = AttemptOutcome.CANCELLED.value
SUCCEEDED_OUTCOME = AttemptOutcome.SUCCEEDED.value

# A job with no group, or the head of a group with nothing running: within a group, jobs
# run one at a time in (priority, id) order; a retrying head keeps its place (the group
# waits for it), a dead or cancelled one no longer blocks. `group_key IS NULL` comes
# first so ungrouped candidates never run the subquery (EXPLAIN: "never executed").
GROUP_IS_FREE = f"""(c.group_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM jobdesk_jobs AS peer
             WHERE peer.group_key = c.group_key AND {ACTIVE_GROUP_SQL}
               AND peer.id <> c.id
               AND (peer.status = '{RUNNING}' OR peer.priority < c.priority
                    OR (peer.priority = c.priority AND peer.id < c.id))))"""

# A paused queue's jobs stay where they are, attempts untouched (`shared.core.queues`).
# `NOT IN` over the tiny (usually empty) pause table: PostgreSQL reads it once into a
# hashed subplan. A correlated `NOT EXISTS` became an anti-join that the planner, with
# every job in one queue and no statistics on the empty pause table, estimated to keep
# no row at all — so LIMIT no longer cut the scan's cost, the claim's estimate went past
# `jit_above_cost`, and every claim spent ~0.5 s compiling JIT code (measured at a 60k
# backlog: 690 ms per claim, 0.6 ms with this form). Both columns are NOT NULL, so
# `NOT IN` has no NULL surprise.
QUEUE_NOT_PAUSED = """c.queue NOT IN (SELECT qp.queue FROM jobdesk_queue_pauses AS qp)"""

# A row with no attempt left (written by hand or by an old bug) would break the attempts
# CHECK and with it every claim; `attempts < max_attempts` leaves it to the operator.
CANDIDATE_WHERE = f"""{CLAIMABLE_SQL} AND c.next_run_at <= {{now}}
           AND c.attempts < c.max_attempts{{filters}}
           AND {QUEUE_NOT_PAUSED}
           AND {GROUP_IS_FREE}"""

CLAIM_SET = f"""status = '{RUNNING}', attempts = attempts + 1, locked_by = {{worker}},
       locked_at = {{now}}, started_at = {{now}}, lease_token = {{lease}},
       lease_expires_at = {{expires}}, updated_at = {{now}}"""

#: Returned by a claim: the first fields of `ClaimedJob`, in its order.
CLAIM_COLUMNS = (
    "id, job_type, queue, payload, attempts, max_attempts, priority, idempotency_key, "
    "group_key, timeout_seconds"
)

#: What a success writes (the batch's `now` and `result` spliced in per dialect).
SUCCEEDED_SET = f"""status = '{SUCCEEDED}', finished_at = {{now}}, updated_at = {{now}},
       result = {{result}}, last_error = NULL, error_fingerprint = NULL, locked_by = NULL,
       locked_at = NULL, lease_token = NULL, lease_expires_at = NULL"""

#: What a failed attempt writes, from the batch row `f` (`error`, `fingerprint`,
#: `retry_at`, NULL for no retry): `cancelled` when an operator asked, `dead` when no
#: retry was decided or the attempts are spent, else `failed` until `retry_at`.
FAILED_SET = f"""status = CASE
           WHEN jobdesk_jobs.cancel_requested_at IS NOT NULL THEN '{CANCELLED}'
           WHEN f.retry_at IS NULL OR jobdesk_jobs.attempts >= jobdesk_jobs.max_attempts
           THEN '{DEAD}' ELSE '{FAILED}' END,
       next_run_at = COALESCE(f.retry_at, jobdesk_jobs.next_run_at),
       finished_at = CASE
           WHEN jobdesk_jobs.cancel_requested_at IS NOT NULL OR f.retry_at IS NULL
             OR jobdesk_jobs.attempts >= jobdesk_jobs.max_attempts THEN {{now}} END,
       last_error = f.error, error_fingerprint = f.fingerprint, updated_at = {{now}},
       locked_by = NULL, locked_at = NULL, lease_token = NULL, lease_expires_at = NULL"""

#: What a hand-back writes (snoozed, released unstarted or at shutdown), from the batch
#: row `h` (`until`): back to `queued` at `until` with the attempt not counted, or
#: `cancelled` — attempt kept — when an operator asked meanwhile.
HANDED_BACK_SET = f"""status = CASE
           WHEN jobdesk_jobs.cancel_requested_at IS NOT NULL THEN '{CANCELLED}'
           ELSE '{QUEUED}' END,
       attempts = CASE
           WHEN jobdesk_jobs.cancel_requested_at IS NOT NULL THEN jobdesk_jobs.attempts
           ELSE jobdesk_jobs.attempts - 1 END,
       next_run_at = h.until,
       finished_at = CASE
           WHEN jobdesk_jobs.cancel_requested_at IS NOT NULL THEN {{now}}
           ELSE jobdesk_jobs.finished_at END,
       updated_at = {{now}},
       locked_by = NULL, locked_at = NULL, lease_token = NULL, lease_expires_at = NULL"""
