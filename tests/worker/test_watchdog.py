"""The freeze watchdog (B13): a handler holding the GIL ends its worker process, which
its supervisor restarts; the job then goes on like after any other crash."""

from __future__ import annotations

import io
import os
import re
import signal
import sys
import time

import pytest
import sqlalchemy as sa

from jobdesk import enqueue
from jobdesk.worker.watchdog import (
    GRACE_SECONDS,
    MIN_LIMIT_SECONDS,
    FreezeWatchdog,
    default_limit,
    limit_at,
)
from tests import zygote
from tests.worker.procs import JOB_MODULE, JOBDESK, Workers, attempts_of, effect_rows, job, wait_for

pytestmark = pytest.mark.slow

#: How long after the frozen worker's end the witness's record may come: its second try
#: (its first one may wait on a lock the frozen process holds), bounded by its own
#: database timeout. No reaper runs in these tests, so only the witness writes.
WITNESSED_SECONDS = 10


def test_a_frozen_worker_exits_past_the_timeout_with_every_stack_and_the_job_ends_dead(
    engine: sa.Engine, procs: Workers
) -> None:
    with engine.begin() as conn:
        hog = enqueue(conn, "t.hog", {}, max_attempts=1)  # hard timeout 1 s
        after = enqueue(conn, "t.effect", {"key": "after-the-freeze"})
    frozen = procs.start("--concurrency", "1")  # the limit stays at its 60 s default
    wait_for(lambda: effect_rows(engine, f"run:{hog}:1"), 20)
    started = time.monotonic()
    # SIGTERM cannot reach a process whose Python code does not run.
    frozen.signal(signal.SIGTERM)
    assert frozen.proc.wait(30) == 1
    # The job's 1 s timeout plus the 5 s grace, not the 60 s limit.
    assert time.monotonic() - started < GRACE_SECONDS + 1 + 10
    log = frozen.log()
    assert "watchdog armed" in log
    assert re.search(r"Timeout \(0:00:0\d(\.\d+)?\)!", log), log[-2000:]
    assert " in hog" in log  # the frozen handler's frame, named in the dump
    # The watchdog's witness recorded the attempt — before the process ended, or right
    # after it when the frozen process held a lock the record needed: no reaper needed
    # (none runs here), and the error names the watchdog (it said only "worker lost …
    # stopped renewing its lease" before).
    wait_for(lambda: job(engine, hog).status == "dead", WITNESSED_SECONDS)
    (attempt,) = attempts_of(engine, hog)
    assert attempt.outcome == "lost"
    assert "worker lost" in attempt.error
    assert re.match(
        r"worker lost: stopped by the watchdog: worker \S+ could run no Python code: the "
        r"handler held the interpreter \(the GIL\) [5-9]s past this attempt's 1s timeout$",
        attempt.error,
    ), attempt.error
    assert "stopped renewing its lease" not in attempt.error

    procs.start()  # what the supervisor does: a fresh worker
    wait_for(lambda: job(engine, after).status == "succeeded", 30)
    assert len(attempts_of(engine, hog)) == 1


# The process exits or stays: no database write is involved.
@pytest.mark.one_database
def test_the_limit_caps_a_freeze_whatever_the_timeout(engine: sa.Engine, procs: Workers) -> None:
    with engine.begin() as conn:
        hog = enqueue(conn, "t.hog", {}, timeout=3600)
    frozen = procs.start(env={"JOBDESK_WATCHDOG_SECONDS": "5"})
    wait_for(lambda: effect_rows(engine, f"run:{hog}:1"), 20)
    assert frozen.proc.wait(30) == 1
    assert "Timeout (0:00:0" in frozen.log()


# The process exits or stays: no database write is involved.
@pytest.mark.one_database
def test_a_healthy_worker_keeps_running_past_the_limit(engine: sa.Engine, procs: Workers) -> None:
    with engine.begin() as conn:
        slow = enqueue(conn, "t.sleep", {"seconds": 8})
    worker = procs.start(env={"JOBDESK_WATCHDOG_SECONDS": "5"})
    wait_for(lambda: job(engine, slow).status == "succeeded", 30)
    assert worker.alive()
    assert worker.stop() == 0
    assert "Timeout" not in worker.log()


def test_zero_turns_the_watchdog_off_and_a_stream_without_a_descriptor_cannot_take_it() -> None:
    assert FreezeWatchdog(0, sys.__stderr__).start(lambda: None) is False
    assert FreezeWatchdog(5, io.StringIO()).start(lambda: None) is False


def test_the_default_limit_is_two_leases_and_at_least_a_minute() -> None:
    assert default_limit(30) == 60
    assert default_limit(2) == 60
    assert default_limit(120) == 240


def test_the_timer_runs_to_the_earliest_timeout_plus_the_grace_within_bounds() -> None:
    now = 1000.0
    assert limit_at(now, None, 60) == 60
    assert limit_at(now, now + 10, 60) == 10 + GRACE_SECONDS
    assert limit_at(now, now + 3600, 60) == 60
    assert limit_at(now, now - 30, 60) == MIN_LIMIT_SECONDS  # overdue: the floor
    assert limit_at(now, None, 1) == MIN_LIMIT_SECONDS


@pytest.mark.one_database  # refused before the database is opened
def test_a_limit_under_the_floor_is_refused_naming_the_setting(db_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBDESK_")}
    env |= {"JOBDESK_DATABASE_URL": db_url, "JOBDESK_WATCHDOG_SECONDS": "2"}
    done = zygote.run([str(JOBDESK), "worker", "--jobs", JOB_MODULE], env=env, timeout=60)
    assert done.returncode == 1
    assert "JOBDESK_WATCHDOG_SECONDS=2: must be 0 (off) or at least 5 seconds" in done.stderr


# --- the watchdog's witness --------------------------------------------------------------


def _witness_pid(log: str) -> int:
    found = re.search(r"the watchdog's witness runs as process (\d+)", log)
    assert found, log[-2000:]
    return int(found.group(1))


def _gone(pid: int) -> bool:
    """Exited (a zombie nobody reaped yet counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_frozen_worker_with_attempts_left_sends_the_job_back_to_retry_naming_the_watchdog(
    engine: sa.Engine, procs: Workers
) -> None:
    with engine.begin() as conn:
        hog = enqueue(conn, "t.hog", {}, max_attempts=3)
    frozen = procs.start("--concurrency", "1")
    wait_for(lambda: effect_rows(engine, f"run:{hog}:1"), 20)
    assert frozen.proc.wait(30) == 1
    wait_for(lambda: job(engine, hog).status != "running", WITNESSED_SECONDS)
    row = job(engine, hog)
    assert (row.status, row.attempts) == ("failed", 1)
    assert row.last_error.startswith("worker lost: stopped by the watchdog: ")
    assert "held the interpreter (the GIL)" in row.last_error


def test_every_job_of_a_frozen_worker_names_the_watchdog(engine: sa.Engine, procs: Workers) -> None:
    """Two slots: one handler sleeps (it holds no interpreter), the other holds it. The
    watchdog cannot tell which one froze the process: the attempt past its timeout says a
    handler held the interpreter past it, the other that it ran while the process froze."""
    with engine.begin() as conn:
        sleeper = enqueue(conn, "t.sleep", {"seconds": 60}, max_attempts=1)
    frozen = procs.start("--concurrency", "2")
    wait_for(lambda: effect_rows(engine, f"run:{sleeper}:1"), 20)
    with engine.begin() as conn:
        hog = enqueue(conn, "t.hog", {}, max_attempts=1)
    wait_for(lambda: effect_rows(engine, f"run:{hog}:1"), 20)
    assert frozen.proc.wait(30) == 1
    wait_for(lambda: job(engine, sleeper).status != "running", WITNESSED_SECONDS)
    assert (job(engine, hog).status, job(engine, sleeper).status) == ("dead", "dead")
    (hogged,) = attempts_of(engine, hog)
    assert re.search(
        r"could run no Python code: a handler \(this one or another\) held the interpreter "
        r"\(the GIL\) \ds past this attempt's 1s timeout$",
        hogged.error,
    ), hogged.error
    (slept,) = attempts_of(engine, sleeper)
    assert slept.outcome == "lost"
    assert slept.error.endswith(
        "could run no Python code (a handler held the interpreter, the GIL) while this attempt ran"
    ), slept.error


def test_a_killed_worker_is_not_taken_for_a_frozen_one_and_its_witness_exits(
    engine: sa.Engine, procs: Workers
) -> None:
    with engine.begin() as conn:
        sleeper = enqueue(conn, "t.sleep", {"seconds": 60}, max_attempts=1)
    killed = procs.start()
    witness = _witness_pid(killed.log())
    wait_for(lambda: effect_rows(engine, f"run:{sleeper}:1"), 20)
    killed.kill()
    wait_for(lambda: _gone(witness), 10)
    assert job(engine, sleeper).status == "running"  # the witness wrote nothing
    procs.start()  # its reaper steps in once the lease runs out
    wait_for(lambda: job(engine, sleeper).status == "dead", 30)
    (attempt,) = attempts_of(engine, sleeper)
    assert "stopped renewing its lease" in attempt.error
    assert "watchdog" not in attempt.error


def test_a_stopped_worker_takes_its_witness_with_it(engine: sa.Engine, procs: Workers) -> None:
    worker = procs.start()
    witness = _witness_pid(worker.log())
    assert not _gone(witness)
    assert worker.stop() == 0
    assert _gone(witness)


def test_a_worker_suspended_past_the_limit_is_ended_and_its_jobs_say_so(
    engine: sa.Engine, procs: Workers
) -> None:
    with engine.begin() as conn:
        sleeper = enqueue(conn, "t.sleep", {"seconds": 60}, max_attempts=1)
    stopped = procs.start(env={"JOBDESK_WATCHDOG_SECONDS": "5"})
    wait_for(lambda: effect_rows(engine, f"run:{sleeper}:1"), 20)
    stopped.signal(signal.SIGSTOP)
    try:
        wait_for(lambda: job(engine, sleeper).status == "dead", 30)
    finally:
        stopped.signal(signal.SIGCONT)
    assert stopped.proc.wait(30) == 1  # what the watchdog does to a process that resumes
    (attempt,) = attempts_of(engine, sleeper)
    assert attempt.outcome == "lost"
    assert attempt.error.endswith(
        "was suspended from outside (SIGSTOP) for longer than the watchdog allows"
    )
