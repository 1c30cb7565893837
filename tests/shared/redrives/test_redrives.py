"""Paced redrives on both databases: the frozen set, the pace under an injected clock,
the stop rule, pause / resume / cancel, jobs decided by hand meanwhile, the audit
trail — and two leaders stepping one redrive at the same moment."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.core.errors import ConflictError, NotFoundError, ValidationError
from jobdesk.shared.core.masking import fingerprint
from jobdesk.shared.core.models import job_attempts, jobs
from jobdesk.shared.operator.commands.triage import ignore_dead, retry_dead
from jobdesk.shared.operator.filters import JobFilters
from jobdesk.shared.redrives.commands import (
    cancel_redrive,
    pause_redrive,
    resume_redrive,
    start_redrive,
)
from jobdesk.shared.redrives.models import redrive_items, redrives
from jobdesk.shared.redrives.queries import (
    RedriveView,
    failed_again,
    get_redrive,
    list_redrives,
    redrive_progress,
)
from jobdesk.shared.redrives.rules import StopRule
from jobdesk.shared.redrives.selection import preview_redrive
from jobdesk.shared.redrives.stepper import StepResult, active_redrive_ids, redrive_step
from jobdesk.worker.context import JobContext
from jobdesk.worker.registry import Registry, job
from jobdesk.worker.testing import drain
from tests.factories import job_row, make_job

T0 = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)
CRM_ERROR = "ConnectTimeout: POST https://crm.example.com/hooks timed out after 10.0s"
GROUP = fingerprint(CRM_ERROR)
#: A rule that never holds the pace back in tests of the pace alone.
NO_PROBATION = StopRule(1000, 1000)


def dead_jobs(conn: sa.Connection, count: int, **fields: Any) -> list[int]:
    values: dict[str, Any] = {
        "job_type": "webhook.deliver",
        "queue": "webhooks",
        "status": "dead",
        "attempts": 5,
        "max_attempts": 5,
        "last_error": CRM_ERROR,
        "error_fingerprint": GROUP,
        "finished_at": T0 - timedelta(hours=1),
        **fields,
    }
    return [
        make_job(conn, payload={"endpoint": "crm", "event": "user.created", "n": n}, **values)
        for n in range(count)
    ]


def start(
    engine: sa.Engine,
    *,
    rate: int = 60,
    rule: StopRule = NO_PROBATION,
    filters: JobFilters | None = None,
    now: datetime = T0,
) -> int:
    with engine.begin() as conn:
        return start_redrive(
            conn,
            filters or JobFilters(fingerprint=GROUP),
            rate_per_minute=rate,
            stop_rule=rule,
            actor="sam",
            reason="CRM is back",
            now=now,
        )


def step(engine: sa.Engine, redrive_id: int, seconds: float) -> StepResult | None:
    with engine.begin() as conn:
        return redrive_step(conn, redrive_id, now=T0 + timedelta(seconds=seconds))


def view(engine: sa.Engine, redrive_id: int) -> RedriveView:
    with engine.connect() as conn:
        found = get_redrive(conn, redrive_id)
    assert found is not None
    return found


def new_jobs(engine: sa.Engine, redrive_id: int) -> list[int]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                sa.select(redrive_items.c.new_job_id)
                .where(
                    redrive_items.c.redrive_id == redrive_id,
                    redrive_items.c.new_job_id.is_not(None),
                )
                .order_by(redrive_items.c.job_id)
            ).scalars()
        )


def first_attempt(engine: sa.Engine, job_ids: list[int], outcome: str) -> None:
    """The new jobs' first attempts end with `outcome` (as a worker would record it)."""
    status = {"succeeded": "succeeded", "permanent": "dead"}.get(outcome, "failed")
    with engine.begin() as conn:
        for job_id in job_ids:
            conn.execute(
                sa.insert(job_attempts).values(
                    job_id=job_id, attempt=1, worker_id="w", outcome=outcome, finished_at=T0,
                    error=None if outcome == "succeeded" else CRM_ERROR,
                )
            )  # fmt: skip
            error = None if status == "succeeded" else CRM_ERROR
            conn.execute(
                sa.update(jobs)
                .where(jobs.c.id == job_id)
                .values(status=status, attempts=1, last_error=error)
            )


def audit_trail(engine: sa.Engine, redrive_id: int) -> list[tuple[str, str]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(audit_log.c.action, audit_log.c.actor)
            .where(audit_log.c.subject == f"redrive:{redrive_id}", audit_log.c.action != "retry")
            .order_by(audit_log.c.id)
        )
        return [(row.action, row.actor) for row in rows]


# --- starting -----------------------------------------------------------------------------


def test_start_freezes_the_matching_dead_jobs_and_audits_it(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        group = dead_jobs(conn, 4)
        dead_jobs(conn, 1, last_error="SMTP 550", error_fingerprint=fingerprint("SMTP 550"))
        decided = dead_jobs(conn, 1, resolution="ignored", resolved_by="ana")
    redrive_id = start(engine, rate=120, rule=StopRule(3, 10))
    with engine.begin() as conn:
        dead_jobs(conn, 1)  # dies after the start: not part of this redrive
        items = list(
            conn.execute(
                sa.select(redrive_items.c.job_id).where(redrive_items.c.redrive_id == redrive_id)
            ).scalars()
        )
        entry = conn.execute(sa.select(audit_log)).one()
    assert sorted(items) == group
    assert decided[0] not in items
    found = view(engine, redrive_id)
    assert (found.state, found.total, found.rate_per_minute) == ("running", 4, 120)
    assert (found.stop_failures, found.stop_window) == (3, 10)
    assert found.selection == {"fingerprint": GROUP}
    assert found.description.startswith(f"error group {GROUP} (“ConnectTimeout: POST")
    assert redrive_progress(found) == "0 of 4 requeued, 0 failed again"
    assert (entry.action, entry.actor, entry.subject, entry.reason) == (
        "redrive.start", "sam", f"redrive:{redrive_id}", "CRM is back",
    )  # fmt: skip
    assert entry.details["jobs"] == 4
    assert entry.details["stop_rule"] == "3/10"
    assert entry.details["rate_per_minute"] == 120


@pytest.mark.parametrize(
    ("filters", "rate", "reason", "field", "words"),
    [
        (JobFilters(), 60, "why", "selection", "choose what to redrive"),
        (JobFilters(sort="oldest"), 60, "why", "selection", "choose what to redrive"),
        (JobFilters(job_type="email.send"), 60, "why", "selection", "no dead job that needs"),
        (JobFilters(fingerprint=GROUP), 0, "why", "rate", "from 1 to 10,000"),
        (JobFilters(fingerprint=GROUP), 10_001, "why", "rate", "from 1 to 10,000"),
        (JobFilters(fingerprint=GROUP), 60, "  ", "reason", "is required"),
    ],
)
def test_start_refuses_what_it_cannot_do_and_writes_nothing(
    engine: sa.Engine, filters: JobFilters, rate: int, reason: str, field: str, words: str
) -> None:
    with engine.begin() as conn:
        dead_jobs(conn, 2)
    with engine.begin() as conn, pytest.raises(ValidationError) as refused:
        start_redrive(
            conn,
            filters,
            rate_per_minute=rate,
            stop_rule=StopRule(),
            actor="sam",
            reason=reason,
            now=T0,
        )
    assert refused.value.field == field
    assert words in refused.value.message
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(redrives)).scalar() == 0
        assert conn.execute(sa.select(sa.func.count()).select_from(redrive_items)).scalar() == 0
        assert conn.execute(sa.select(sa.func.count()).select_from(audit_log)).scalar() == 0


def test_a_refused_start_leaves_the_callers_transaction_usable(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        dead_jobs(conn, 1)
    with engine.begin() as conn:
        with pytest.raises(ValidationError):
            start_redrive(
                conn, JobFilters(job_type="email.send"), rate_per_minute=60,
                stop_rule=StopRule(), actor="sam", reason="why", now=T0,
            )  # fmt: skip
        redrive_id = start_redrive(
            conn, JobFilters(fingerprint=GROUP), rate_per_minute=60,
            stop_rule=StopRule(), actor="sam", reason="why", now=T0,
        )  # fmt: skip
    assert view(engine, redrive_id).total == 1


def test_a_second_redrive_leaves_out_the_jobs_the_first_still_holds(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        group = dead_jobs(conn, 3)
        others = dead_jobs(conn, 2, error_fingerprint=fingerprint("other"), last_error="other")
    first = start(engine)
    step(engine, first, 0)  # requeues the first of the group: the others are still held
    with engine.connect() as conn:
        preview = preview_redrive(conn, JobFilters(job_type="webhook.deliver"), now=T0)
    assert (preview.matching, preview.held, preview.jobs, preview.capped) == (4, 2, 2, False)
    assert preview.description == "type webhook.deliver"
    second = start(engine, filters=JobFilters(job_type="webhook.deliver"))
    assert view(engine, second).total == 2
    with engine.begin() as conn:
        cancel_redrive(conn, first, actor="sam", reason="wrong time", now=T0)
    third = start(engine, filters=JobFilters(job_type="webhook.deliver", queue="webhooks"))
    with engine.connect() as conn:
        items = set(
            conn.execute(
                sa.select(redrive_items.c.job_id).where(redrive_items.c.redrive_id == third)
            ).scalars()
        )
    # The first one's unreached jobs are free again; the second's are not.
    assert items == set(group[1:])
    assert not items & set(others)


# --- the pace -----------------------------------------------------------------------------


def test_sixty_a_minute_requeues_one_a_second(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        dead_jobs(conn, 70)
    redrive_id = start(engine, rate=60)
    counts = []
    for half_seconds in range(120):
        result = step(engine, redrive_id, half_seconds / 2)
        assert result is not None
        counts.append(view(engine, redrive_id).requeued)
    assert counts[0] == 1  # one at once
    for half_seconds, requeued in enumerate(counts):
        assert requeued == half_seconds // 2 + 1
    assert view(engine, redrive_id).requeued == 60
    assert len(new_jobs(engine, redrive_id)) == 60


def test_a_late_step_catches_up_ten_seconds_and_no_more(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        dead_jobs(conn, 40)
    redrive_id = start(engine, rate=60)
    assert step(engine, redrive_id, 0).requeued == 1  # type: ignore[union-attr]
    # Due since 290 s: the ten of 290-299 s; the one of 300 s goes with the next step.
    assert step(engine, redrive_id, 300).requeued == 10  # type: ignore[union-attr]
    assert step(engine, redrive_id, 300.5).requeued == 1  # type: ignore[union-attr]
    assert step(engine, redrive_id, 300.9).requeued == 0  # type: ignore[union-attr]
    assert step(engine, redrive_id, 301).requeued == 1  # type: ignore[union-attr]


def test_a_fast_pace_requeues_several_per_step(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        dead_jobs(conn, 30)
    redrive_id = start(engine, rate=600)
    done = [step(engine, redrive_id, s).requeued for s in (0, 1, 2)]  # type: ignore[union-attr]
    assert done == [1, 10, 10]


def test_the_same_step_twice_shares_one_allowance(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        dead_jobs(conn, 20)
    redrive_id = start(engine, rate=60)
    assert step(engine, redrive_id, 5).requeued == 6  # type: ignore[union-attr]
    assert step(engine, redrive_id, 5).requeued == 0  # type: ignore[union-attr]


def test_two_leaders_stepping_at_once_do_not_exceed_the_pace(engine: sa.Engine) -> None:
    """Two steps in two transactions at the same moment (a leader hand-over): the
    redrive's row lock makes the second wait for the first and find nothing due."""
    with engine.begin() as conn:
        dead_jobs(conn, 20)
    redrive_id = start(engine, rate=60)
    barrier = threading.Barrier(2)
    results: list[int] = []
    errors: list[BaseException] = []

    def leader() -> None:
        try:
            with engine.connect() as conn:
                barrier.wait(timeout=10)
                with conn.begin():
                    found = redrive_step(conn, redrive_id, now=T0 + timedelta(seconds=5))
                    assert found is not None
                    results.append(found.requeued)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=leader) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert sorted(results) == [0, 6]
    assert view(engine, redrive_id).requeued == 6
    assert len(new_jobs(engine, redrive_id)) == 6


# --- the stop rule ------------------------------------------------------------------------


def test_it_stops_when_k_of_the_first_n_fail_again(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        dead = dead_jobs(conn, 20)
    redrive_id = start(engine, rate=600, rule=StopRule(3, 5))
    assert step(engine, redrive_id, 0).requeued == 1  # type: ignore[union-attr]
    # Ten are due, but never past the first five in one go.
    assert step(engine, redrive_id, 1).requeued == 4  # type: ignore[union-attr]
    # On probation: the first five must show how they fare before more go.
    assert step(engine, redrive_id, 2).requeued == 0  # type: ignore[union-attr]
    made = new_jobs(engine, redrive_id)
    first_attempt(engine, made[:2], "failed")
    first_attempt(engine, made[2:3], "succeeded")
    result = step(engine, redrive_id, 3)
    assert result is not None
    assert (result.state, result.requeued, result.judged) == (
        "running",
        0,
        {"failed": 2, "succeeded": 1},
    )
    assert view(engine, redrive_id).on_probation
    first_attempt(engine, made[3:4], "timeout")
    result = step(engine, redrive_id, 4)
    assert result is not None
    assert result.state == "stopped"
    found = view(engine, redrive_id)
    assert found.stopped_reason == (
        "3 of the first 4 new jobs failed again (stop rule: 3 of 5 new jobs failing)"
    )
    assert (found.requeued, found.failed, found.succeeded, found.changed_by) == (5, 3, 1, "jobdesk")
    assert found.finished_at == T0 + timedelta(seconds=4)
    assert step(engine, redrive_id, 60) is None
    with engine.connect() as conn:
        untouched = conn.execute(
            sa.select(sa.func.count()).where(jobs.c.id.in_(dead), jobs.c.resolution.is_(None))
        ).scalar_one()
        latest = failed_again(conn, redrive_id)
    assert untouched == 15
    assert {entry.new_job_id for entry in latest} == {made[0], made[1], made[3]}
    assert audit_trail(engine, redrive_id) == [
        ("redrive.start", "sam"),
        ("redrive.stop", "jobdesk"),
    ]


def test_probation_ends_once_the_first_jobs_cannot_trip_the_rule(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        dead_jobs(conn, 12)
    redrive_id = start(engine, rate=600, rule=StopRule(3, 5))
    step(engine, redrive_id, 0)
    step(engine, redrive_id, 1)
    made = new_jobs(engine, redrive_id)
    assert len(made) == 5
    first_attempt(engine, made[:3], "succeeded")  # 3 > 5 - 3: no 3 failures possible now
    result = step(engine, redrive_id, 2)
    assert result is not None
    assert result.requeued == 7  # the rest, at ten a second


def test_a_relapse_later_on_stops_it_too(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        dead_jobs(conn, 30)
    redrive_id = start(engine, rate=600, rule=StopRule(2, 4))
    step(engine, redrive_id, 0)
    step(engine, redrive_id, 1)
    first_attempt(engine, new_jobs(engine, redrive_id), "succeeded")
    assert step(engine, redrive_id, 2).requeued == 10  # type: ignore[union-attr]
    made = new_jobs(engine, redrive_id)
    first_attempt(engine, made[4:6], "succeeded")
    first_attempt(engine, made[6:7], "failed")
    assert step(engine, redrive_id, 3).state == "running"  # type: ignore[union-attr]
    first_attempt(engine, made[7:8], "lost")
    assert step(engine, redrive_id, 4).state == "stopped"  # type: ignore[union-attr]
    assert view(engine, redrive_id).stopped_reason == (
        "2 of the last 4 new jobs failed again (stop rule: 2 of 4 new jobs failing)"
    )


def test_new_jobs_run_by_a_worker_are_judged_by_their_first_attempt(engine: sa.Engine) -> None:
    """The real path: the worker runs the new jobs (a CRM that answers again, except
    for one account), the steps read how their first attempts went."""
    registry = Registry()

    @job("t.crm_sync", target=registry, max_attempts=3)
    def crm_sync(payload: dict[str, Any], ctx: JobContext) -> None:
        if payload["n"] == 1:
            raise RuntimeError("account 1 is locked")

    with engine.begin() as conn:
        dead_jobs(conn, 3, job_type="t.crm_sync", queue="default")
    redrive_id = start(engine, rate=600, rule=StopRule(2, 3))
    step(engine, redrive_id, 0)
    step(engine, redrive_id, 1)
    drain(engine, registry=registry, now=T0 + timedelta(seconds=1))
    result = step(engine, redrive_id, 2)
    assert result is not None
    assert result.judged == {"succeeded": 2, "failed": 1}
    found = view(engine, redrive_id)
    assert found.state == "finished"
    assert redrive_progress(found) == "3 of 3 requeued, 1 failed again, 2 succeeded"
    assert audit_trail(engine, redrive_id)[-1] == ("redrive.finish", "jobdesk")


# --- operators' controls --------------------------------------------------------------------


def test_pause_resume_and_cancel_are_compare_and_set_and_audited(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        dead_jobs(conn, 30)
    redrive_id = start(engine, rate=60)
    step(engine, redrive_id, 0)
    with engine.begin() as conn:
        pause_redrive(
            conn, redrive_id, actor="ana", reason="CRM slow again", now=T0 + timedelta(seconds=1)
        )
    made = new_jobs(engine, redrive_id)
    first_attempt(engine, made, "succeeded")
    paused = step(engine, redrive_id, 100)
    assert paused is not None
    assert (paused.state, paused.requeued, paused.judged) == ("paused", 0, {"succeeded": 1})
    with engine.begin() as conn, pytest.raises(ConflictError, match="is paused; only a running"):
        pause_redrive(conn, redrive_id, actor="bob", reason="me too", now=T0)
    with engine.begin() as conn:
        resume_redrive(conn, redrive_id, actor="ana", now=T0 + timedelta(seconds=200))
    # Counted from the resume: one at once, not a burst for the time it was paused.
    assert step(engine, redrive_id, 200).requeued == 1  # type: ignore[union-attr]
    assert step(engine, redrive_id, 201).requeued == 1  # type: ignore[union-attr]
    with engine.begin() as conn:
        cancel_redrive(
            conn,
            redrive_id,
            actor="ana",
            reason="enough for today",
            now=T0 + timedelta(seconds=202),
        )
    found = view(engine, redrive_id)
    assert (found.state, found.changed_by, found.change_reason) == (
        "cancelled",
        "ana",
        "enough for today",
    )
    assert found.requeued == 3
    assert step(engine, redrive_id, 300) is None
    with engine.begin() as conn, pytest.raises(ConflictError, match="is cancelled"):
        resume_redrive(conn, redrive_id, actor="ana", now=T0)
    with engine.begin() as conn, pytest.raises(ValidationError, match="reason"):
        cancel_redrive(conn, redrive_id, actor="ana", reason="", now=T0)
    with engine.begin() as conn, pytest.raises(NotFoundError, match="redrive #999 does not"):
        pause_redrive(conn, 999, actor="ana", reason="x", now=T0)
    assert audit_trail(engine, redrive_id) == [
        ("redrive.start", "sam"),
        ("redrive.pause", "ana"),
        ("redrive.resume", "ana"),
        ("redrive.cancel", "ana"),
    ]
    with engine.connect() as conn:
        retries = conn.execute(
            sa.select(audit_log.c.actor, audit_log.c.reason, audit_log.c.details).where(
                audit_log.c.action == "retry"
            )
        ).all()
    assert len(retries) == 3
    assert {(r.actor, r.reason) for r in retries} == {("sam", "CRM is back")}
    assert all(r.details == {"redrive": redrive_id} for r in retries)


def test_jobs_decided_by_hand_meanwhile_are_skipped_without_using_the_pace(
    engine: sa.Engine,
) -> None:
    with engine.begin() as conn:
        dead = dead_jobs(conn, 6)
        dead += dead_jobs(conn, 1, job_type="gone.away")
    redrive_id = start(engine, rate=60)
    with engine.begin() as conn:
        ignore_dead(conn, dead[1], actor="ana", reason="test account", now=T0)
        by_hand = retry_dead(conn, dead[2], actor="ana", now=T0)
    assert step(engine, redrive_id, 0).requeued == 1  # type: ignore[union-attr]
    result = step(engine, redrive_id, 1)
    assert result is not None
    assert (result.requeued, result.skipped) == (1, 2)  # 2 and 3 passed over, 4 requeued
    step(engine, redrive_id, 2)
    assert step(engine, redrive_id, 3).requeued == 1  # type: ignore[union-attr]
    result = step(engine, redrive_id, 4)
    assert result is not None
    assert (result.requeued, result.skipped) == (0, 1)  # the unknown type
    with engine.connect() as conn:
        fates = dict(
            conn.execute(
                sa.select(redrive_items.c.job_id, redrive_items.c.skipped).where(
                    redrive_items.c.redrive_id == redrive_id
                )
            ).all()
        )
        assert job_row(conn, dead[6]).resolution is None  # left for a human
        assert job_row(conn, by_hand).retried_from_id == dead[2]
    assert fates == {
        dead[0]: None, dead[1]: "resolved", dead[2]: "resolved", dead[3]: None,
        dead[4]: None, dead[5]: None, dead[6]: "unknown_type",
    }  # fmt: skip
    found = view(engine, redrive_id)
    assert (found.requeued, found.skipped, found.left) == (4, 3, 0)
    assert redrive_progress(found) == (
        "4 of 7 requeued, 3 skipped, 0 failed again, 4 waiting for a first outcome"
    )


def test_the_list_is_newest_first_and_pages_by_id(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        dead_jobs(conn, 2)
        dead_jobs(
            conn, 2, job_type="email.send", queue="email", error_fingerprint=fingerprint("smtp")
        )
    crm = start(engine)
    email = start(engine, filters=JobFilters(job_type="email.send"))
    with engine.begin() as conn:
        pause_redrive(conn, email, actor="ana", reason="not yet", now=T0)
        cancel_redrive(conn, crm, actor="ana", reason="wrong group", now=T0)
        assert active_redrive_ids(conn) == [email]
        assert [r.id for r in list_redrives(conn)] == [email, crm]
        assert [r.id for r in list_redrives(conn, before_id=email)] == [crm]
        assert [r.id for r in list_redrives(conn, active_only=True)] == [email]


def test_retention_deletes_ended_redrives_with_their_rows(engine: sa.Engine) -> None:
    from jobdesk.shared.redrives.commands import cancel_redrive
    from jobdesk.shared.retention.pruning import prune_redrives_batch

    with engine.begin() as conn:
        dead_jobs(conn, 2)
    ended, running = start(engine), None
    with engine.begin() as conn:
        cancel_redrive(conn, ended, actor="sam", reason="wrong group", now=T0)
        dead_jobs(conn, 1)
    running = start(engine)
    with engine.begin() as conn:
        assert prune_redrives_batch(conn, T0).deleted == 0  # ended at T0, not before
        assert prune_redrives_batch(conn, T0 + timedelta(days=1)).deleted == 1
        left = set(conn.execute(sa.select(redrives.c.id)).scalars())
        items = set(conn.execute(sa.select(redrive_items.c.redrive_id)).scalars())
    assert left == items == {running}
