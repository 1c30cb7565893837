"""Every way a handler can end settles its attempt: `SystemExit`, `KeyboardInterrupt`,
`GeneratorExit`, a custom `BaseException`, exceptions that cannot be printed. Their
attempts fail (and the job goes `dead` when its attempts are spent), the slot threads
live on, and the jobs enqueued after them run — in a real `jobdesk worker`, through
`drain`, and in the executor and the slot pool on their own."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import enqueue
from jobdesk.shared.core.claim import ClaimedJob
from jobdesk.shared.settings import Settings
from jobdesk.worker.context import JobContext
from jobdesk.worker.executor import Attempt, Kind, Outcome, describe_exception, execute
from jobdesk.worker.executor import make_attempt as new_attempt
from jobdesk.worker.pool import SlotPool, _SlotThread
from jobdesk.worker.registry import Registry, job
from jobdesk.worker.testing import drain
from tests.worker.jobmods.hostile import EXPECTED, RAISES, Unprintable
from tests.worker.procs import Workers, all_succeeded, attempts_of, wait_for
from tests.worker.procs import job as job_row

HOSTILE = "tests.worker.jobmods.hostile"


# --- a real worker ---------------------------------------------------------------------


@pytest.mark.slow
def test_a_worker_fails_each_hostile_attempt_keeps_its_slots_and_runs_what_comes_next(
    engine: sa.Engine, procs: Workers
) -> None:
    """Twelve hostile attempts through four slots: before, the first four killed every
    slot thread and the worker went on claiming jobs nobody would run."""
    with engine.begin() as conn:
        ids = {
            name: enqueue(conn, "t.hostile", {"raises": name}, max_attempts=2) for name in RAISES
        }
    worker = procs.start("--jobs", HOSTILE, "--concurrency", "4")
    wait_for(lambda: all(job_row(engine, i).status == "dead" for i in ids.values()), 60)
    for name, job_id in ids.items():
        attempts = attempts_of(engine, job_id)
        assert [a.outcome for a in attempts] == ["failed", "failed"], name
        assert [a.error.splitlines()[0] for a in attempts] == [EXPECTED[name]] * 2
        assert job_row(engine, job_id).attempts == 2
    with engine.begin() as conn:
        normal = [enqueue(conn, "t.effect", {"key": f"after-{i}"}) for i in range(50)]
    wait_for(lambda: all_succeeded(engine, normal), 60)
    assert worker.alive()
    assert worker.stop() == 0
    log = worker.log()
    assert "Traceback" not in log, log[-3000:]


@pytest.mark.slow
def test_a_worker_stopped_during_hostile_jobs_leaves_none_running_or_reset(
    engine: sa.Engine, procs: Workers
) -> None:
    """Before, SIGTERM handed a job whose slot thread had died back to `queued` with its
    attempt uncounted: it could never reach `dead`."""
    with engine.begin() as conn:
        ids = [
            enqueue(conn, "t.hostile", {"raises": "system_exit"}, max_attempts=1) for _ in range(4)
        ]
    worker = procs.start("--jobs", HOSTILE, "--concurrency", "2")
    wait_for(lambda: all(job_row(engine, i).status == "dead" for i in ids), 30)
    assert worker.stop() == 0
    assert {job_row(engine, i).status for i in ids} == {"dead"}
    assert {job_row(engine, i).attempts for i in ids} == {1}


# --- drain (the same executor path, synchronously) ----------------------------------


@pytest.mark.parametrize("raises", sorted(RAISES))
def test_drain_fails_each_hostile_attempt_then_buries_the_job(
    engine: sa.Engine, raises: str
) -> None:
    reg = Registry()
    ran: list[int] = []

    @job("t.hostile", target=reg, max_attempts=2)
    def hostile(payload: dict[str, Any], ctx: JobContext) -> None:
        ran.append(ctx.attempt)
        RAISES[payload["raises"]]()

    with engine.begin() as conn:
        job_id = enqueue(conn, "t.hostile", {"raises": raises}, max_attempts=2)
    first = drain(engine, registry=reg)
    assert [(j.kind, j.status) for j in first.jobs] == [(Kind.FAILED, "failed")]
    assert first.jobs[0].error is not None
    assert first.jobs[0].error.splitlines()[0] == EXPECTED[raises]
    second = drain(engine, registry=reg, now=datetime.now(UTC) + timedelta(hours=2))
    assert [(j.kind, j.status) for j in second.jobs] == [(Kind.FAILED, "dead")]
    assert ran == [1, 2]
    assert job_row(engine, job_id).status == "dead"


# --- the executor on its own --------------------------------------------------------

NOW = datetime(2030, 1, 1, tzinfo=UTC)
ENGINE = sa.create_engine("sqlite://")
UNIT = Registry()


@job("t.unit", timeout=30, target=UNIT)
def unit(payload: dict[str, Any], ctx: JobContext) -> None:
    RAISES[payload["raises"]]()


def make_attempt(job_id: int, payload: dict[str, Any] | None = None) -> Attempt:
    job_type = UNIT.get("t.unit")
    assert job_type is not None
    claimed = ClaimedJob(
        job_id, "t.unit", "default", payload or {}, 1, 5, 5, None, None, None, 1, NOW, NOW, "w"
    )
    return new_attempt(claimed, job_type, ENGINE, Settings())


@pytest.mark.parametrize("raises", sorted(RAISES))
def test_execute_turns_every_hostile_ending_into_a_failed_outcome(raises: str) -> None:
    attempt = make_attempt(1, {"raises": raises})
    outcome = execute(attempt.job, attempt.job_type, attempt.ctx, clock=lambda: NOW)
    assert outcome.kind is Kind.FAILED
    assert outcome.error is not None
    assert outcome.error.splitlines()[0] == EXPECTED[raises]
    assert " in unit" in outcome.error or "line" in outcome.error  # the stack is kept


def test_an_exception_whose_traceback_cannot_be_formatted_is_described_without_it() -> None:
    class NoSource:
        def get_source(self, name: str) -> str:
            raise RuntimeError("the loader refuses")

    namespace: dict[str, Any] = {"__name__": "vanishing_module", "__loader__": NoSource()}
    code = compile("def boom():\n    raise Unprintable()\n", "/nowhere/vanishing.py", "exec")
    namespace["Unprintable"] = Unprintable
    exec(code, namespace)
    try:
        namespace["boom"]()
    except Unprintable as exc:
        caught = exc
    assert describe_exception(caught) == "Unprintable: <unprintable Unprintable>"


def test_a_hostile_exception_type_name_is_survived() -> None:
    class Meta(type):
        def __getattribute__(cls, name: str) -> Any:
            if name == "__name__":
                raise SystemExit("no name")
            return super().__getattribute__(name)

    class Nameless(Exception, metaclass=Meta):
        pass

    assert describe_exception(Nameless("x")).startswith("Exception: x")


# --- the slot pool on its own -------------------------------------------------------


class Runs:
    """The pool's `run`: raises what `raises` says for an attempt's id (a runtime bug),
    else settles the attempt as succeeded."""

    def __init__(self, raises: dict[int, Callable[[], BaseException]] | None = None) -> None:
        self.raises = raises or {}
        self.ran: list[int] = []
        self.threads: set[str] = set()

    def __call__(self, attempt: Attempt) -> None:
        self.ran.append(attempt.job.id)
        self.threads.add(threading.current_thread().name)
        make = self.raises.get(attempt.job.id)
        if make is not None:
            raise make()
        attempt.settle(Outcome(attempt.job, Kind.SUCCEEDED, duration=0.001))


def pool_of(slots: int, run: Any, **kw: Any) -> SlotPool:
    return SlotPool("all", slots, run=run, on_timeout=lambda a: None, on_free=lambda: None, **kw)


@pytest.mark.parametrize(
    "exc", [lambda: SystemExit(2), KeyboardInterrupt, Unprintable], ids=["exit", "interrupt", "bad"]
)
def test_a_slot_whose_run_raises_settles_the_attempt_and_keeps_going(
    exc: Callable[[], BaseException],
) -> None:
    runs = Runs({1: exc, 2: exc})
    crashed: list[tuple[int, BaseException]] = []

    def on_crash(attempt: Attempt, error: BaseException) -> None:
        crashed.append((attempt.job.id, error))
        attempt.settle(Outcome(attempt.job, Kind.FAILED, error="slot failed"))

    pool = pool_of(1, runs, on_crash=on_crash)
    batch = [make_attempt(i) for i in range(1, 6)]
    try:
        pool.submit(batch)
        wait_for(lambda: pool.busy == 0, 10, interval=0.005)
        assert runs.ran == [1, 2, 3, 4, 5]
        assert [job_id for job_id, _ in crashed] == [1, 2]
        assert [a.outcome.kind for a in batch if a.outcome] == [Kind.FAILED] * 2 + [
            Kind.SUCCEEDED
        ] * 3
        assert len(runs.threads) == 1  # the same thread went on
        assert len(pool._threads) == 1
    finally:
        pool.stop()


def test_without_an_owner_a_crashed_slot_settles_its_attempt_as_failed_naming_why() -> None:
    pool = pool_of(1, Runs({1: lambda: SystemExit(3)}))
    attempt = make_attempt(1)
    try:
        pool.submit([attempt])
        wait_for(lambda: pool.busy == 0, 10, interval=0.005)
        assert attempt.outcome is not None
        assert attempt.outcome.kind is Kind.FAILED
        assert attempt.outcome.error is not None
        assert attempt.outcome.error.startswith(
            "SlotFailed: the worker's slot thread failed while running this attempt: "
            "SystemExit: SystemExit(3) raised by the handler"
        )
    finally:
        pool.stop()


def test_a_slot_thread_that_dies_in_the_pool_is_replaced() -> None:
    """`on_free` raising is an exception out of the pool's own code: the thread ends, a
    fresh one takes its slot, and the jobs behind it run."""
    calls = []

    def on_free() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise SystemExit("from the pool's own code")

    runs = Runs()
    pool = SlotPool("all", 1, run=runs, on_timeout=lambda a: None, on_free=on_free)
    batch = [make_attempt(i) for i in range(1, 6)]
    try:
        pool.submit(batch)
        wait_for(lambda: pool.busy == 0, 10, interval=0.005)
        assert runs.ran == [1, 2, 3, 4, 5]
        assert all(a.outcome is not None and a.outcome.kind is Kind.SUCCEEDED for a in batch)
        assert len(runs.threads) == 2
        assert len(pool._threads) == 1
    finally:
        pool.stop()


def test_a_slot_thread_gone_without_a_word_is_found_settled_and_replaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = _SlotThread.run

    def vanish(self: _SlotThread) -> None:
        self.pool._next(self)  # takes an attempt and ends, holding it

    monkeypatch.setattr(_SlotThread, "run", vanish)
    crashed: list[int] = []

    def on_crash(attempt: Attempt, error: BaseException) -> None:
        crashed.append(attempt.job.id)
        attempt.settle(Outcome(attempt.job, Kind.FAILED, error=str(error)))

    runs = Runs()
    pool = pool_of(1, runs, on_crash=on_crash)
    batch = [make_attempt(i) for i in range(1, 4)]
    try:
        pool.submit(batch)
        wait_for(lambda: pool.running_count == 1 and not pool._threads[0].is_alive(), 10)
        monkeypatch.setattr(_SlotThread, "run", original)
        pool.check_deadlines()
        wait_for(lambda: pool.busy == 0, 10, interval=0.005)
        assert crashed == [1]
        assert runs.ran == [2, 3]
        assert batch[0].outcome is not None
        assert batch[0].outcome.error == "the slot thread running it is gone"
    finally:
        pool.stop()


def test_a_pool_that_cannot_start_a_slot_thread_claims_nothing_and_hands_its_jobs_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def cannot_start(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    original = _SlotThread.start
    monkeypatch.setattr(_SlotThread, "start", cannot_start)
    runs = Runs()
    pool = pool_of(2, runs)
    pool.submit([make_attempt(i) for i in range(10, 13)])
    assert pool.stranded
    assert pool.free() == 0  # however quick its handlers were so far
    assert sorted(a.job.id for a in pool.take_excess()) == [10, 11, 12]
    assert not pool.stranded
    assert pool.free() == 2
    # Threads can be started again: the next deadline check fills the slots.
    pool.submit([make_attempt(20)])
    assert pool.stranded
    monkeypatch.setattr(_SlotThread, "start", original)
    try:
        pool.check_deadlines()
        wait_for(lambda: pool.busy == 0, 10, interval=0.005)
        assert runs.ran == [20]
    finally:
        pool.stop()
