"""Per-key concurrency and fair turns (`jobdesk.shared.flow.concurrency`), both databases:
slots taken at enqueue, given up by every writer, handed to the next waiting job in
order; keys without a limit take turns in the claim order; 12 threads claiming at once
on PostgreSQL never run more than the limit."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import NewJob, ValidationError, enqueue, enqueue_many
from jobdesk.shared.core import decisions, transitions
from jobdesk.shared.core.claim import ClaimedJob, claim
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.models import jobs
from jobdesk.shared.flow.concurrency import FAIR_WINDOW, key_slots, refill_free_slots
from jobdesk.shared.flow.models import concurrency_keys
from jobdesk.worker.registry import Registry, job
from jobdesk.worker.testing import drain

_reg = Registry()


@job("slots.limited", concurrency=2, target=_reg)
def limited(payload: dict[str, Any], ctx: object) -> None:
    return None


@job("slots.fair", target=_reg)
def fair(payload: dict[str, Any], ctx: object) -> None:
    return None


def statuses(engine: sa.Engine, key: str) -> list[tuple[int, str]]:
    with engine.connect() as conn:
        return [
            (row.id, row.status)
            for row in conn.execute(
                sa.select(jobs.c.id, jobs.c.status)
                .where(jobs.c.concurrency_key == key)
                .order_by(jobs.c.id)
            )
        ]


def take(engine: sa.Engine, limit: int = 100) -> list[ClaimedJob]:
    with engine.begin() as conn:
        return claim(conn, worker_id="w1", limit=limit)


def finish(engine: sa.Engine, held: list[ClaimedJob]) -> None:
    with engine.begin() as conn:
        now = db_now(conn)
        for claimed in held:
            assert transitions.complete(conn, claimed.ref, now=now)


def add(engine: sa.Engine, job_type: str, count: int, key: str, **options: Any) -> list[int]:
    with engine.begin() as conn:
        return [
            enqueue(conn, job_type, {"n": n}, concurrency_key=key, **options) for n in range(count)
        ]


def test_a_limited_key_holds_n_slots_and_hands_them_on_in_order(engine: sa.Engine) -> None:
    ids = add(engine, "slots.limited", 5, "tenant:1")
    assert statuses(engine, "tenant:1") == [
        (ids[0], "queued"), (ids[1], "queued"),
        (ids[2], "waiting"), (ids[3], "waiting"), (ids[4], "waiting"),
    ]  # fmt: skip
    first = take(engine)
    assert [j.id for j in first] == ids[:2]
    assert take(engine) == []  # running jobs keep their slots
    finish(engine, first[:1])
    with engine.connect() as conn:
        slots = key_slots(conn, "tenant:1")
    assert (slots.limit, slots.held, slots.running, slots.waiting) == (2, 2, 1, 2)
    assert slots.sentence() == "2 of 2 slots of tenant:1 busy (2 waiting)"
    second = take(engine)
    assert [j.id for j in second] == [ids[2]]  # the next in line, and only one
    finish(engine, [first[1], *second])
    third = take(engine)
    assert [j.id for j in third] == ids[3:]
    finish(engine, third)
    assert {status for _, status in statuses(engine, "tenant:1")} == {"succeeded"}


def test_a_retrying_job_keeps_its_slot_and_a_dead_one_gives_it_up(engine: sa.Engine) -> None:
    ids = add(engine, "slots.limited", 3, "tenant:2", max_attempts=2)
    held = take(engine)
    with engine.begin() as conn:
        now = db_now(conn)
        assert transitions.fail(conn, held[0].ref, error="boom", now=now, retry_at=now)
    assert dict(statuses(engine, "tenant:2"))[ids[2]] == "waiting"
    retried = take(engine)
    assert [j.id for j in retried] == [ids[0]]
    with engine.begin() as conn:
        now = db_now(conn)
        assert transitions.fail(conn, retried[0].ref, error="boom", now=now, retry_at=None)
    assert dict(statuses(engine, "tenant:2")) == {
        ids[0]: "dead",
        ids[1]: "running",
        ids[2]: "queued",
    }


def test_cancelling_a_holder_lets_the_next_in_and_cancelling_a_waiter_changes_nothing(
    engine: sa.Engine,
) -> None:
    ids = add(engine, "slots.limited", 4, "tenant:3")
    with engine.begin() as conn:
        decisions.cancel(conn, [ids[3]], actor="ana", reason="not needed", now=db_now(conn))
    assert dict(statuses(engine, "tenant:3"))[ids[2]] == "waiting"
    with engine.begin() as conn:
        decisions.cancel(conn, [ids[0]], actor="ana", reason="not needed", now=db_now(conn))
    assert dict(statuses(engine, "tenant:3")) == {
        ids[0]: "cancelled", ids[1]: "queued", ids[2]: "queued", ids[3]: "cancelled",
    }  # fmt: skip


def test_keys_without_a_limit_take_turns(engine: sa.Engine) -> None:
    """A key's 150 jobs, then another key's 10: the second key does not wait for the
    first one's 150 (only for its first `FAIR_WINDOW`)."""
    with engine.begin() as conn:
        big = enqueue_many(
            conn, [NewJob("slots.fair", {"n": n}, concurrency_key="big") for n in range(150)]
        )
        small = enqueue_many(
            conn, [NewJob("slots.fair", {"n": n}, concurrency_key="small") for n in range(10)]
        )
    counts = Counter(status for _, status in statuses(engine, "big"))
    assert counts == {"queued": FAIR_WINDOW, "waiting": 150 - FAIR_WINDOW}
    order = [j.id for j in take(engine, 100)] + [j.id for j in take(engine, 100)]
    assert order[:FAIR_WINDOW] == big[:FAIR_WINDOW]
    # Then the small key, before the big key's jobs that moved in as the first were taken.
    assert order[FAIR_WINDOW : FAIR_WINDOW + 10] == small
    assert order[FAIR_WINDOW + 10 :] == big[FAIR_WINDOW:]
    # A key without a limit never limits how many run.
    with engine.connect() as conn:
        running = conn.execute(
            sa.select(sa.func.count()).where(jobs.c.status == "running")
        ).scalar_one()
    assert running == 160


def test_a_released_dependent_takes_a_slot_or_waits_for_one(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        first = enqueue(conn, "slots.fair", {})
        ids = [
            enqueue(conn, "slots.limited", {"n": n}, concurrency_key="tenant:4", after=[first])
            for n in range(3)
        ]
    assert [s for _, s in statuses(engine, "tenant:4")] == ["waiting"] * 3
    assert drain(engine, registry=_reg, max_jobs=1).succeeded == 1  # `first`
    assert dict(statuses(engine, "tenant:4")) == {
        ids[0]: "queued", ids[1]: "queued", ids[2]: "waiting",
    }  # fmt: skip
    assert drain(engine, registry=_reg).succeeded == 3


def test_plain_sql_rows_and_triage_retries_share_the_slots(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.insert(jobs),
            [
                {"job_type": "slots.limited", "concurrency_key": "tenant:5",
                 "concurrency_limit": 1, "max_attempts": 1}
                for _ in range(2)
            ],
        )  # fmt: skip
    (first, second) = statuses(engine, "tenant:5")
    assert (first[1], second[1]) == ("queued", "waiting")
    held = take(engine)
    with engine.begin() as conn:
        now = db_now(conn)
        transitions.fail(conn, held[0].ref, error="boom", now=now, retry_at=None)
        requeued = decisions.requeue_dead(conn, [first[0]], actor="ana", reason=None, now=now)
    retry_id = requeued.new_ids[first[0]]
    found = dict(statuses(engine, "tenant:5"))
    assert found == {first[0]: "dead", second[0]: "queued", retry_id: "waiting"}


def test_bad_concurrency_options_are_refused_by_name(engine: sa.Engine) -> None:
    with pytest.raises(ValidationError, match="concurrency"):
        job("slots.bad", concurrency=0, target=Registry())
    with pytest.raises(ValidationError, match="concurrency"):
        job("slots.bad", concurrency=True, target=Registry())
    with engine.begin() as conn, pytest.raises(ValidationError, match="concurrency_key"):
        enqueue(conn, "slots.limited", {}, concurrency_key="x" * 201)
    with engine.begin() as conn, pytest.raises(ValidationError, match=r"jobs\[1\].concurrency_key"):
        enqueue_many(
            conn,
            [NewJob("slots.limited", {}, concurrency_key="a"), {"job_type": "slots.limited",
             "payload": {}, "concurrency_key": ""}],
        )  # fmt: skip


@pytest.mark.postgresql_only
def test_twelve_threads_claiming_at_once_never_run_more_than_the_limit(
    engine: sa.Engine,
) -> None:
    """Claims, completions and enqueues of one key from 12 threads: at no commit do more
    than 2 jobs of the key run (read from the attempts' start and finish times)."""
    add(engine, "slots.limited", 200, "tenant:hot")
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(400):
                held = take(engine, 3)
                if held:
                    finish(engine, held)
                    continue
                with engine.begin() as conn:  # the leader's pass, as in a worker fleet
                    refill_free_slots(conn)
                if not any(s != "succeeded" for _, s in statuses(engine, "tenant:hot")):
                    return
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(12)]
    for thread in threads:
        thread.start()
    add(engine, "slots.limited", 40, "tenant:hot")
    for thread in threads:
        thread.join()
    assert errors == []
    assert {s for _, s in statuses(engine, "tenant:hot")} == {"succeeded"}
    with engine.connect() as conn:
        spans = conn.execute(
            sa.text(
                "SELECT a.started_at, a.finished_at FROM jobdesk_job_attempts a "
                "JOIN jobdesk_jobs j ON j.id = a.job_id WHERE j.concurrency_key = 'tenant:hot'"
            )
        ).all()
    assert len(spans) == 240
    assert max_overlap(spans) <= 2


def max_overlap(spans: list[Any]) -> int:
    """Most spans (start, end) open at once."""
    return peak_running([(started, 1) for started, _ in spans] + [(end, -1) for _, end in spans])


def peak_running(steps: list[tuple[Any, int]]) -> int:
    """Most things running at once, from (time, +1 start / -1 end) steps; at equal times
    an end comes before a start."""
    running = peak = 0
    for _, step in sorted(steps, key=lambda s: (s[0], s[1])):
        running += step
        peak = max(peak, running)
    return peak


def test_retention_deletes_keys_no_job_holds_or_waits_for(engine: sa.Engine) -> None:
    from jobdesk.shared.flow.models import concurrency_keys
    from jobdesk.shared.retention.pruning import prune_concurrency_keys_batch

    (done,) = add(engine, "slots.limited", 1, "tenant:done")
    add(engine, "slots.limited", 3, "tenant:busy")  # two run, one waits
    finish(engine, [j for j in take(engine) if j.id == done])
    with engine.begin() as conn:
        now = db_now(conn)
        assert prune_concurrency_keys_batch(conn, now - timedelta(days=1)).deleted == 0
        assert prune_concurrency_keys_batch(conn, now + timedelta(days=1)).deleted == 1
        left = set(conn.execute(sa.select(concurrency_keys.c.key)).scalars())
    assert left == {"tenant:busy"}
    # The next enqueue with the pruned key makes its row again, limit and all.
    add(engine, "slots.limited", 3, "tenant:done")
    assert [s for _, s in statuses(engine, "tenant:done")] == [
        "succeeded", "queued", "queued", "waiting",
    ]  # fmt: skip


@pytest.mark.postgresql_only
def test_a_freed_slot_passes_over_a_waiter_being_written(engine: sa.Engine) -> None:
    """The next waiter is locked by someone else's transaction (an operator cancelling
    it): the slot goes to the one after it instead of staying free."""
    ids = add(engine, "slots.limited", 4, "tenant:6")
    held = take(engine)
    with engine.connect() as blocker:
        blocker.execute(sa.select(jobs.c.id).where(jobs.c.id == ids[2]).with_for_update()).all()
        finish(engine, held[:1])
        assert dict(statuses(engine, "tenant:6"))[ids[3]] == "queued"
        blocker.rollback()
    assert dict(statuses(engine, "tenant:6"))[ids[2]] == "waiting"


@pytest.mark.postgresql_only
def test_an_enqueue_and_completions_in_open_transactions_do_not_deadlock(
    engine: sa.Engine,
) -> None:
    """A transaction completing two of a key's jobs in two statements, and an enqueue of
    the key in between (which counts the key's holders, the one being completed among
    them): neither waits for the other. The slot the enqueue could not see freed is filled
    by the refill pass."""
    ids = add(engine, "slots.limited", 2, "tenant:7")
    first, second = sorted(take(engine), key=lambda claimed: claimed.id)
    with engine.connect() as completing:
        completing.execute(sa.text("SET lock_timeout = '5s'"))
        now = db_now(completing)
        assert transitions.complete(completing, second.ref, now=now)
        with engine.connect() as enqueuing:
            enqueuing.execute(sa.text("SET lock_timeout = '5s'"))
            (late,) = [enqueue(enqueuing, "slots.limited", {}, concurrency_key="tenant:7")]
            assert transitions.complete(completing, first.ref, now=now)
            completing.commit()
            enqueuing.commit()
    assert dict(statuses(engine, "tenant:7"))[late] == "waiting"  # counted a stale holder
    with engine.begin() as conn:
        assert refill_free_slots(conn) == 1
        assert refill_free_slots(conn) == 0
    assert statuses(engine, "tenant:7") == [
        (ids[0], "succeeded"), (ids[1], "succeeded"), (late, "queued"),
    ]  # fmt: skip


@pytest.mark.postgresql_only
def test_refill_passes_take_turns_through_the_keys(engine: sa.Engine) -> None:
    """Slots left free with jobs waiting (rows written as a race would leave them): each
    pass looks at the next keys in key order, and a full turn fills every one."""
    with engine.begin() as conn:
        conn.execute(
            sa.insert(jobs),
            [
                {"job_type": "slots.limited", "concurrency_key": f"tenant:r{k}",
                 "concurrency_limit": 2, "status": "waiting", "waiting_for": 0}
                for k in range(3) for _ in range(3)
            ],
        )  # fmt: skip
        conn.execute(
            sa.insert(concurrency_keys),
            [{"key": f"tenant:r{k}", "slot_limit": 2} for k in range(3)],
        )
        refill = driver(conn).refill_slots
        assert refill(conn, after_key="", max_keys=2) == (4, "tenant:r1")
        assert refill(conn, after_key="tenant:r1", max_keys=2) == (2, None)
        assert refill(conn, after_key="", max_keys=2) == (0, "tenant:r1")
    found = Counter(status for k in range(3) for _, status in statuses(engine, f"tenant:r{k}"))
    assert found == {"queued": 6, "waiting": 3}
