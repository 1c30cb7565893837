"""Per-key concurrency across processes: 600 jobs over 4 keys of a type declaring
`concurrency=3`, three worker processes, one SIGKILLed while it runs jobs. What the
handlers themselves noted (start and end, per process) never shows more than 3 jobs of
one key at once — a killed process's unfinished jobs count as running until it died —
everything drains, and every job succeeded exactly once (both databases)."""

from __future__ import annotations

import re
import signal
import time
from collections import defaultdict
from pathlib import Path

import pytest
import sqlalchemy as sa

from jobdesk import NewJob, enqueue_many
from jobdesk.shared.core.db import make_engine
from jobdesk.shared.core.models import job_attempts, jobs
from jobdesk.shared.settings import Settings
from tests.shared.flow.test_concurrency import peak_running
from tests.worker.jobmods.keyed import LIMIT
from tests.worker.procs import Worker, Workers, statuses, wait_for

pytestmark = pytest.mark.slow

MODULE = "tests.worker.jobmods.keyed"
KEYS = 4
JOBS = 600


def running_in(engine: sa.Engine, worker_log: str) -> bool:
    """The worker (by its id in its log) holds running jobs right now."""
    found = re.search(r"worker (\S+) started", worker_log)
    if found is None:
        return False
    worker_id = found.group(1)
    with engine.connect() as conn:
        held = conn.execute(
            sa.select(sa.func.count()).where(
                jobs.c.status == "running", jobs.c.locked_by == worker_id
            )
        ).scalar_one()
    return held > 0


def kill_while_it_holds_jobs(engine: sa.Engine, worker: Worker) -> float:
    """SIGKILL the worker at a moment it holds running jobs; when it died. It is stopped
    (SIGSTOP) while the database is asked, so it cannot finish them between the check and
    the kill — on a busy machine the test process can lose its core for longer than a
    job takes. The question is asked in a deferred (read-only) transaction: on SQLite the
    stopped worker may hold the write lock, which `BEGIN IMMEDIATE` would wait out and
    fail on."""
    url = engine.url.render_as_string(hide_password=False)
    reader = make_engine(url, settings=Settings(), sqlite_begin="DEFERRED")

    def stopped_holding_jobs() -> bool:
        worker.signal(signal.SIGSTOP)
        holding = False
        try:
            holding = running_in(reader, worker.log())
        finally:
            if not holding:  # also when the question failed: never leave it stopped
                worker.signal(signal.SIGCONT)
        return holding

    try:
        wait_for(stopped_holding_jobs, 30, interval=0.01)
    finally:
        reader.dispose()
    worker.signal(signal.SIGKILL)
    return time.time()


def peak_per_key(trace_dir: Path, killed_pid: int, killed_at: float) -> dict[str, int]:
    """Most jobs of each key running at once, from the handlers' own notes; a start the
    killed process never ended ends when it was killed."""
    open_starts: dict[tuple[int, str], tuple[str, float]] = {}
    events: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for trace in trace_dir.glob("*.log"):
        pid = int(trace.stem)
        for line in trace.read_text().splitlines():
            event, job_id, key, at = line.split()
            if event == "start":
                open_starts[pid, job_id] = (key, float(at))
                events[key].append((float(at), 1))
            else:
                open_starts.pop((pid, job_id), None)
                events[key].append((float(at), -1))
    for (pid, _), (key, _) in open_starts.items():
        assert pid == killed_pid, "a live worker left a job unfinished"
        events[key].append((killed_at, -1))
    return {key: peak_running(steps) for key, steps in events.items()}


def test_never_more_than_n_per_key_across_processes_and_a_kill(
    engine: sa.Engine, procs: Workers, tmp_path: Path
) -> None:
    trace_dir = tmp_path / "trace"
    trace_dir.mkdir()
    env = {
        "KEYED_TRACE_DIR": str(trace_dir),
        "JOBDESK_LEASE_SECONDS": "4",
        "JOBDESK_HEARTBEAT_SECONDS": "0.8",
    }
    doomed = procs.start("--jobs", MODULE, "--concurrency", "8", env=env)
    procs.start("--jobs", MODULE, "--concurrency", "8", env=env)
    procs.start("--jobs", MODULE, "--concurrency", "8", env=env)
    with engine.begin() as conn:
        enqueue_many(
            conn,
            [
                NewJob(
                    "t.keyed", {"key": f"tenant:{n % KEYS}"}, concurrency_key=f"tenant:{n % KEYS}"
                )
                for n in range(JOBS)
            ],
        )
    wait_for(lambda: statuses(engine).get("succeeded", 0) >= 60, 60)
    killed_at = kill_while_it_holds_jobs(engine, doomed)
    wait_for(lambda: statuses(engine).get("succeeded", 0) >= JOBS, 120, interval=0.2)
    procs.cleanup()

    assert statuses(engine) == {"succeeded": JOBS}
    with engine.connect() as conn:
        successes = conn.execute(
            sa.select(job_attempts.c.job_id, sa.func.count())
            .where(job_attempts.c.outcome == "succeeded")
            .group_by(job_attempts.c.job_id)
        ).all()
        lost = conn.execute(
            sa.select(sa.func.count()).where(job_attempts.c.outcome == "lost")
        ).scalar_one()
    assert len(successes) == JOBS
    assert {n for _, n in successes} == {1}  # nothing doubled
    assert lost > 0  # the killed worker held jobs; the reaper gave their slots back
    peaks = peak_per_key(trace_dir, doomed.proc.pid, killed_at)
    assert set(peaks) == {f"tenant:{n}" for n in range(KEYS)}
    assert max(peaks.values()) <= LIMIT, peaks
    # The limit was used, not merely respected by running one at a time.
    assert max(peaks.values()) == LIMIT, peaks
