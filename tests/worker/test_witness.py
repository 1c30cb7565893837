"""The watchdog's witness on its own: when it acts (the worker's word stops before the
watchdog's moment), when it does not (the pipe closes: the worker ended otherwise), and
what it writes. The whole story with real frozen workers is in `test_watchdog`."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.claim import claim
from jobdesk.shared.core.retry import ExponentialBackoff, RetryPolicy
from jobdesk.shared.core.transitions import complete
from jobdesk.shared.settings import Settings
from jobdesk.worker.witness import (
    ACTED,
    MESSAGE_BYTES,
    RunningAttempt,
    encode,
    record,
    watch,
)
from tests.factories import make_job
from tests.worker.procs import attempts_of, job, wait_for


class Watching:
    """`watch` on a thread, fed through a real pipe; its record fails `failures` times."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.tell_read, self.tell_write = os.pipe()
        self.mark_read, self.mark_write = os.pipe()
        os.set_blocking(self.mark_read, False)
        self.recorded: list[dict[str, Any]] = []
        self.result: list[int] = []
        self.thread = threading.Thread(
            target=lambda: self.result.append(watch(self.tell_read, self.mark_write, self._record)),
            daemon=True,
        )
        self.thread.start()

    def _record(self, plan: dict[str, Any]) -> int | None:
        self.recorded.append(plan)
        if self.failures:
            self.failures -= 1
            return None
        return 1

    def tell(self, in_seconds: float, jobs: list[RunningAttempt] | None = None) -> None:
        os.write(self.tell_write, encode(time.monotonic() + in_seconds, "w-1", jobs or []))

    def marked(self) -> bool:
        try:
            return os.read(self.mark_read, 8) == ACTED
        except BlockingIOError:
            return False

    def close(self) -> int:
        os.close(self.tell_write)
        self.thread.join(5)
        for fd in (self.tell_read, self.mark_read, self.mark_write):
            os.close(fd)
        return self.result[0]


def test_the_witness_acts_when_the_workers_word_stops_before_the_moment() -> None:
    watching = Watching()
    running = [RunningAttempt(7, 1234, 1.0, time.monotonic() - 5)]
    watching.tell(0.2, running)
    wait_for(lambda: watching.recorded, 5, interval=0.01)
    assert [(p["worker"], p["jobs"]) for p in watching.recorded] == [
        ("w-1", [[7, 1234, 1.0, running[0].deadline]])
    ]
    wait_for(watching.marked, 5, interval=0.01)
    assert watching.close() == 0
    assert len(watching.recorded) == 1


def test_the_witness_stays_quiet_while_the_worker_keeps_talking_and_when_it_exits() -> None:
    watching = Watching()
    for _ in range(10):  # a live worker re-arms every second, long before the moment
        watching.tell(0.3)
        time.sleep(0.1)
    assert not watching.marked()
    assert watching.close() == 0  # the pipe closed first: the worker ended some other way
    assert watching.recorded == []


def test_a_record_that_failed_is_tried_once_more_when_the_worker_has_exited() -> None:
    # The frozen worker held what the record needed (a row lock, SQLite's write lock).
    watching = Watching(failures=1)
    watching.tell(0.1, [RunningAttempt(7, 1234, 1.0, time.monotonic())])
    wait_for(watching.marked, 5, interval=0.01)
    assert len(watching.recorded) == 1
    assert watching.close() == 0  # the worker exited: the second try
    assert [p["worker"] for p in watching.recorded] == ["w-1", "w-1"]


def test_a_failed_record_is_not_retried_for_a_worker_that_spoke_again() -> None:
    watching = Watching(failures=1)
    watching.tell(0.1)
    wait_for(watching.marked, 5, interval=0.01)
    watching.tell(30)  # it came back to life and re-armed
    time.sleep(0.1)
    assert watching.close() == 0
    assert len(watching.recorded) == 1


def test_a_message_is_cut_to_what_the_pipe_takes_whole_keeping_the_attempts_due_first() -> None:
    running = [RunningAttempt(i, 2**61 + i, 30.0, 1e6 + i) for i in range(500)]
    line = encode(1e6, "host-1234-abcdef", running)
    assert len(line) <= MESSAGE_BYTES
    assert line.endswith(b"\n")
    assert b"[0," in line


NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)
FAST = RetryPolicy(ExponentialBackoff(timedelta(seconds=10), timedelta(seconds=10)))


def test_the_witness_rescues_every_job_of_the_frozen_worker_naming_the_watchdog(
    engine: sa.Engine, db_url: str
) -> None:
    with engine.begin() as conn:
        for attempts in (1, 3, 3, 3):
            make_job(conn, next_run_at=NOW - timedelta(seconds=1), max_attempts=attempts)
        hogged, ran, waited, finished = claim(
            conn, worker_id="w-frozen", limit=4, now=NOW, lease_seconds=30
        )
        make_job(conn, next_run_at=NOW - timedelta(seconds=1))
        (other,) = claim(conn, worker_id="w-other", limit=1, now=NOW, lease_seconds=30)
    with engine.begin() as conn:
        assert complete(conn, finished.ref, now=NOW)  # finished just before the freeze
    act_at = 1000.0
    plan = {
        "at": act_at,
        "worker": "w-frozen",
        "jobs": [
            list(RunningAttempt(hogged.id, hogged.lease_token, 1.0, act_at - 5.2)),
            list(RunningAttempt(ran.id, ran.lease_token, 60.0, act_at + 50)),
            list(RunningAttempt(finished.id, finished.lease_token, 60.0, act_at + 50)),
        ],
    }
    assert record(plan, db_url, Settings(), lambda _type: FAST) == 3
    stopped = "worker lost: stopped by the watchdog: worker w-frozen could run no Python code"
    assert job(engine, hogged.id).status == "dead"  # its only attempt
    (attempt,) = attempts_of(engine, hogged.id)
    assert attempt.outcome == "lost"
    assert attempt.error == (
        f"{stopped}: a handler (this one or another) held the interpreter (the GIL) 5s past "
        "this attempt's 1s timeout"
    )
    retrying = job(engine, ran.id)
    assert retrying.status == "failed"
    assert retrying.last_error == (
        f"{stopped} (a handler held the interpreter, the GIL) while this attempt ran"
    )
    assert job(engine, waited.id).last_error == (
        f"{stopped} (a handler held the interpreter, the GIL) while it held this job"
    )
    assert job(engine, finished.id).status == "succeeded"
    assert job(engine, other.id).status == "running"
    # Nothing left to do: a second pass (or a late one) writes nothing.
    assert record(plan, db_url, Settings(), lambda _type: FAST) == 0


def test_a_worker_that_comes_back_after_its_witness_acted_ends_as_the_watchdog_said() -> None:
    """A freeze that ended within the witness's seconds: the outcomes are written, so
    the process must not go on as if nothing happened."""
    script = textwrap.dedent(
        """
        import time
        from jobdesk.worker.watchdog import FreezeWatchdog

        class Acted:
            def start(self): return True
            def tell(self, *args): pass
            def has_acted(self): return True
            def close(self): pass

        dog = FreezeWatchdog(60, witness=Acted())
        dog.prepare()
        dog.start(lambda: None, lambda: ("w", []))
        time.sleep(20)
        """
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert time.monotonic() - started < 15
    assert "its running attempts were recorded as lost" in done.stderr
    assert "Timeout (" in done.stderr
