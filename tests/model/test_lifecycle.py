"""Model-based tests of the job lifecycle against the real databases (hypothesis).

A `RuleBasedStateMachine` drives the shared functions the worker, the reaper and the
dashboard use — enqueue, claim, complete, fail, snooze, lease expiry + `rescue_expired`,
cancel, cancel requests on running jobs and the worker's stop, triage (retry as a new
job, ignore) and writes with stale leases — in random
orders, on SQLite and on PostgreSQL. A small model predicts each job's status and
attempts; after every step the database is compared with the model and with the
previous snapshot:

- every status change is in `states.ALLOWED_TRANSITIONS`;
- attempts never exceed max_attempts;
- at most one `running` job per group key;
- dead jobs never change, except for the resolution fields;
- every requeued dead job has its audit row and its new job; every cancel is audited;
- a running job with a cancel request never goes back to the queue or to `failed`/`dead`;
- a succeeded job has exactly one `succeeded` attempt row.

Time is the model's own clock (`now`), passed to every function, so a "lease expiry"
is a step, not a sleep.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from jobdesk.shared.core import decisions, transitions
from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.core.claim import JobRef, claim
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.enqueue import enqueue
from jobdesk.shared.core.job_types import TypeDefaults, register_defaults
from jobdesk.shared.core.models import effects, job_attempts, jobs
from jobdesk.shared.core.states import ALLOWED_TRANSITIONS, CANCELLABLE, CLAIMABLE, JobStatus

try:  # triage lands with the dashboard; the machine runs without those rules until then
    from jobdesk.shared.operator.commands import triage
except ImportError:  # pragma: no cover
    triage = None  # type: ignore[assignment]

JOB_TYPE = "model.job"
LEASE = 10
RESOLUTION_FIELDS = {"resolution", "resolved_by", "resolved_at", "resolution_reason", "updated_at"}
Q, R, S, F, D, C = (
    JobStatus.QUEUED,
    JobStatus.RUNNING,
    JobStatus.SUCCEEDED,
    JobStatus.FAILED,
    JobStatus.DEAD,
    JobStatus.CANCELLED,
)

register_defaults(JOB_TYPE, TypeDefaults("model", 5, 3, 60.0))


@dataclass
class Held:
    ref: JobRef
    expires: datetime


class LifecycleMachine(RuleBasedStateMachine):
    engine: sa.Engine

    def __init__(self) -> None:
        super().__init__()
        with self.engine.begin() as conn:
            for table in (job_attempts, audit_log, effects, jobs):
                conn.execute(sa.delete(table))
            # Model time runs ahead of the database clock, so rows whose defaults come
            # from the real clock are already due.
            self.now = db_now(conn).replace(microsecond=0) + timedelta(hours=1)
        self.status: dict[int, JobStatus] = {}
        self.attempts: dict[int, int] = {}
        self.max_attempts: dict[int, int] = {}
        self.group: dict[int, str | None] = {}
        self.due: dict[int, datetime] = {}
        self.held: dict[int, Held] = {}
        self.stale: list[JobRef] = []
        #: Jobs with a cancel request (asked while running).
        self.asked: set[int] = set()
        self.keys: dict[str, int] = {}
        self.snapshot: dict[int, dict[str, Any]] = {}

    # ------------------------------------------------------------------ helpers
    def _begin(self) -> Any:
        return self.engine.begin()

    def _release(self, job_id: int) -> None:
        self.held.pop(job_id, None)

    def _after_failure(self, job_id: int, retry: bool) -> JobStatus:
        if job_id in self.asked:
            return C
        spent = self.attempts[job_id] >= self.max_attempts[job_id]
        return F if retry and not spent else D

    # ------------------------------------------------------------------ rules
    @initialize(groups=st.lists(st.sampled_from([None, "a", "b"]), min_size=2, max_size=5))
    def some_jobs(self, groups: list[str | None]) -> None:
        for group in groups:
            self.enqueue_job(group, 2, None, None)

    @rule(
        group=st.sampled_from([None, None, "a", "b"]),
        max_attempts=st.integers(1, 3),
        delay=st.sampled_from([None, 0, 20]),
        key=st.sampled_from([None, None, "k1", "k2"]),
    )
    def enqueue_job(
        self, group: str | None, max_attempts: int, delay: int | None, key: str | None
    ) -> None:
        run_at = None if delay is None else self.now + timedelta(seconds=delay)
        with self._begin() as conn:
            job_id = enqueue(
                conn,
                JOB_TYPE,
                {"n": len(self.status)},
                group_key=group,
                max_attempts=max_attempts,
                run_at=run_at,
                idempotency_key=key,
            )
        if key is not None and key in self.keys:
            assert job_id == self.keys[key], "a duplicate idempotency key made a new job"
            return
        assert job_id not in self.status
        if key is not None:
            self.keys[key] = job_id
        self.status[job_id] = Q
        self.attempts[job_id] = 0
        self.max_attempts[job_id] = max_attempts
        self.group[job_id] = group
        self.due[job_id] = run_at or self.now - timedelta(hours=1)

    @rule(limit=st.integers(1, 4), worker=st.sampled_from(["w1", "w2"]))
    def claim_jobs(self, limit: int, worker: str) -> None:
        with self._begin() as conn:
            claimed = claim(
                conn,
                worker_id=worker,
                limit=limit,
                job_types=[JOB_TYPE],
                lease_seconds=LEASE,
                now=self.now,
            )
        assert len(claimed) <= limit
        running_groups = {self.group[j] for j, s in self.status.items() if s is R}
        for job in claimed:
            j = job.id
            assert self.status[j] in CLAIMABLE, f"claimed job {j} in {self.status[j]}"
            assert self.due[j] <= self.now, f"claimed job {j} before it was due"
            assert self.attempts[j] < self.max_attempts[j]
            if self.group[j] is not None:
                assert self.group[j] not in running_groups, f"second running job in {self.group[j]}"
                running_groups.add(self.group[j])
            self.status[j] = R
            self.attempts[j] += 1
            assert job.attempt == self.attempts[j]
            self.held[j] = Held(job.ref, self.now + timedelta(seconds=LEASE))
        # Nothing claimable was left behind while the claim came back short.
        if len(claimed) < limit:
            for j, status in self.status.items():
                blocked = self.group[j] is not None and any(
                    o != j
                    and self.group[o] == self.group[j]
                    and (self.status[o] is R or (self.status[o] in CLAIMABLE and o < j))
                    for o in self.status
                )
                assert not (
                    status in CLAIMABLE
                    and self.due[j] <= self.now
                    and self.attempts[j] < self.max_attempts[j]
                    and not blocked
                ), f"job {j} was claimable but not claimed"

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data())
    def complete_job(self, data: st.DataObject) -> None:
        j = data.draw(st.sampled_from(sorted(self.held)))
        with self._begin() as conn:
            done = transitions.complete(conn, self.held[j].ref, now=self.now, result={"ok": 1})
        assert done
        self.status[j] = S
        self._release(j)

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data(), retry=st.booleans())
    def fail_job(self, data: st.DataObject, retry: bool) -> None:
        j = data.draw(st.sampled_from(sorted(self.held)))
        retry_at = self.now + timedelta(seconds=5) if retry else None
        with self._begin() as conn:
            status = transitions.fail(
                conn, self.held[j].ref, error="Boom: model", retry_at=retry_at, now=self.now
            )
        expected = self._after_failure(j, retry)
        assert status is expected, f"job {j}: fail gave {status}, model says {expected}"
        self.status[j] = expected
        if retry_at is not None:
            self.due[j] = retry_at
        self._release(j)

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data())
    def snooze_job(self, data: st.DataObject) -> None:
        j = data.draw(st.sampled_from(sorted(self.held)))
        until = self.now + timedelta(seconds=3)
        with self._begin() as conn:
            assert transitions.snooze(conn, self.held[j].ref, until=until, now=self.now)
        if j in self.asked:
            self.status[j] = C  # a cancel request is not handed back to the queue
        else:
            self.status[j] = Q
            self.attempts[j] -= 1
            self.due[j] = until
        self._release(j)

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data())
    def request_cancel_running(self, data: st.DataObject) -> None:
        ids = data.draw(st.lists(st.sampled_from(sorted(self.held)), unique=True, min_size=1))
        with self._begin() as conn:
            asked = decisions.request_cancel(conn, ids, actor="model", reason="x", now=self.now)
        assert set(asked) == set(ids) - self.asked, "only new requests on running jobs"
        self.asked.update(asked)

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data())
    def stop_on_request(self, data: st.DataObject) -> None:
        j = data.draw(st.sampled_from(sorted(self.held)))
        with self._begin() as conn:
            stopped = transitions.stop_cancelled(
                conn, self.held[j].ref, error="Cancelled: model", now=self.now
            )
        assert stopped == (j in self.asked), f"job {j}: stop without a request"
        if stopped:
            self.status[j] = C
            self._release(j)

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        ids = data.draw(st.lists(st.sampled_from(sorted(self.held)), unique=True, min_size=1))
        with self._begin() as conn:
            kept = transitions.extend_lease(
                conn, [self.held[j].ref for j in ids], lease_seconds=LEASE, now=self.now
            )
        assert sorted(kept) == sorted(ids)
        for j in ids:
            self.held[j].expires = self.now + timedelta(seconds=LEASE)

    @rule(seconds=st.sampled_from([1, 4, 12]))
    def advance_clock(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data())
    def lease_expires(self, data: st.DataObject) -> None:
        """A held job's worker goes silent: the clock passes its lease; the reaper runs."""
        j = data.draw(st.sampled_from(sorted(self.held)))
        self.now = max(self.now, self.held[j].expires + timedelta(seconds=1))
        self.reap()

    @rule()
    def reap(self) -> None:
        with self._begin() as conn:
            rescued = dict(transitions.rescue_expired(conn, now=self.now))
        expired = {j for j, h in self.held.items() if h.expires < self.now}
        assert set(rescued) == expired, f"reaper took {set(rescued)}, expired {expired}"
        for j, status in rescued.items():
            expected = self._after_failure(j, retry=True)
            assert status is expected
            self.status[j] = status
            if status is F:
                self.due[j] = self._db_row(j)["next_run_at"]
            self.stale.append(self.held[j].ref)
            self._release(j)

    @precondition(lambda self: bool(self.stale))
    @rule(data=st.data(), how=st.sampled_from(["complete", "fail", "snooze", "extend", "stop"]))
    def write_with_stale_lease(self, data: st.DataObject, how: str) -> None:
        ref = data.draw(st.sampled_from(self.stale))
        with self._begin() as conn:
            if how == "complete":
                changed: object = transitions.complete(conn, ref, now=self.now)
            elif how == "fail":
                changed = transitions.fail(conn, ref, error="late", retry_at=None, now=self.now)
            elif how == "snooze":
                changed = transitions.snooze(conn, ref, until=self.now, now=self.now)
            elif how == "stop":
                changed = transitions.stop_cancelled(conn, ref, error="late", now=self.now)
            else:
                changed = transitions.extend_lease(conn, [ref], lease_seconds=LEASE, now=self.now)
        assert not changed, f"a write with a lost lease ({how}) changed job {ref.id}"

    @precondition(lambda self: bool(self.status))
    @rule(data=st.data())
    def cancel_jobs(self, data: st.DataObject) -> None:
        ids = data.draw(st.lists(st.sampled_from(sorted(self.status)), unique=True, max_size=3))
        with self._begin() as conn:
            done = decisions.cancel(conn, ids, actor="model", reason="test", now=self.now)
        expected = {j for j in ids if self.status[j] in CANCELLABLE}
        assert set(done) == expected
        for j in done:
            self.status[j] = C

    def _dead_unresolved(self) -> list[int]:
        dead = [j for j, s in self.status.items() if s is D]
        if not dead:
            return []
        with self.engine.connect() as conn:
            return sorted(
                conn.execute(
                    sa.select(jobs.c.id).where(jobs.c.id.in_(dead), jobs.c.resolution.is_(None))
                ).scalars()
            )

    @precondition(lambda self: triage is not None and any(s is D for s in self.status.values()))
    @rule(data=st.data())
    def triage_retry(self, data: st.DataObject) -> None:
        candidates = self._dead_unresolved()
        if not candidates:
            return
        j = data.draw(st.sampled_from(candidates))
        with self._begin() as conn:
            new_id = triage.retry_dead(conn, j, actor="op", reason="model retry", now=self.now)
        self.status[new_id] = Q
        self.attempts[new_id] = 0
        self.max_attempts[new_id] = self.max_attempts[j]
        self.group[new_id] = self.group[j]
        self.due[new_id] = self.now

    @precondition(lambda self: triage is not None and any(s is D for s in self.status.values()))
    @rule(data=st.data())
    def triage_ignore(self, data: st.DataObject) -> None:
        candidates = self._dead_unresolved()
        if not candidates:
            return
        j = data.draw(st.sampled_from(candidates))
        with self._begin() as conn:
            triage.ignore_dead(conn, j, actor="op", reason="not needed", now=self.now)

    # ------------------------------------------------------------------ invariants
    def _db_row(self, job_id: int) -> dict[str, Any]:
        with self.engine.connect() as conn:
            return dict(conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).one()._mapping)

    @invariant()
    def database_agrees_with_model_and_lifecycle(self) -> None:
        with self.engine.connect() as conn:
            rows = {r.id: dict(r._mapping) for r in conn.execute(sa.select(jobs))}
            audits = [dict(r._mapping) for r in conn.execute(sa.select(audit_log))]
            attempt_rows = list(
                conn.execute(sa.select(job_attempts.c.job_id, job_attempts.c.outcome))
            )
        assert set(rows) == set(self.status), "jobs appeared or vanished"
        running_groups: set[str] = set()
        for j, row in rows.items():
            status = JobStatus(row["status"])
            assert status is self.status[j], f"job {j}: database {status}, model {self.status[j]}"
            assert row["attempts"] == self.attempts[j], f"job {j}: attempts differ"
            assert 0 <= row["attempts"] <= row["max_attempts"]
            if status is R and row["group_key"] is not None:
                assert row["group_key"] not in running_groups
                running_groups.add(row["group_key"])
            before = self.snapshot.get(j)
            if before is None:
                continue
            old = JobStatus(before["status"])
            if old is not status:
                assert status in ALLOWED_TRANSITIONS[old], f"job {j}: {old} -> {status}"
            if old is D:
                changed = {k for k in row if row[k] != before[k]} - RESOLUTION_FIELDS
                assert not changed, f"dead job {j} changed: {sorted(changed)}"
                if before["resolution"] is not None:
                    assert row["resolution"] == before["resolution"], "resolution rewritten"
        for j, row in rows.items():
            if row["resolution"] == "requeued":
                assert any(a["job_id"] == j and a["action"] == "retry" for a in audits), (
                    f"requeued job {j} has no audit row"
                )
                assert any(r["retried_from_id"] == j for r in rows.values())
            if row["retried_from_id"] is not None:
                assert rows[row["retried_from_id"]]["resolution"] == "requeued"
            if row["status"] == C.value:
                assert any(a["job_id"] == j and a["action"] == "cancel" for a in audits)
        for j in self.asked:
            assert rows[j]["status"] in (R.value, S.value, C.value), f"asked job {j} requeued"
            assert rows[j]["cancelled_by"] == "model"
        successes: dict[int, int] = {}
        for job_id, outcome in attempt_rows:
            if outcome == "succeeded":
                successes[job_id] = successes.get(job_id, 0) + 1
        for j, status in self.status.items():
            assert successes.get(j, 0) == (1 if status is S else 0), f"job {j} success rows"
        self.snapshot = rows


@pytest.mark.slow
def test_lifecycle_state_machine(engine: sa.Engine) -> None:
    LifecycleMachine.engine = engine
    run_state_machine_as_test(
        LifecycleMachine,
        settings=settings(
            max_examples=50,
            stateful_step_count=50,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
