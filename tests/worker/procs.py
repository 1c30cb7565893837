"""Real `jobdesk worker` subprocesses for acceptance tests, and bounded waiting."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.models import effects, job_attempts, jobs
from tests.zygote import ForkedProcess, Zygote, usable

REPO = Path(__file__).resolve().parents[2]
JOBDESK = Path(sys.executable).with_name("jobdesk")
JOB_MODULE = "tests.worker.jobmods.basic"

#: Short intervals so failure scenarios play out in seconds.
FAST_ENV = {
    "JOBDESK_LEASE_SECONDS": "2",
    "JOBDESK_HEARTBEAT_SECONDS": "0.5",
    "JOBDESK_REAPER_INTERVAL_SECONDS": "0.5",
    "JOBDESK_POLL_INTERVAL_SECONDS": "0.1",
    "JOBDESK_LEADER_LEASE_SECONDS": "1.5",
    "JOBDESK_SHUTDOWN_TIMEOUT_SECONDS": "5",
    "JOBDESK_DB_CONNECT_TIMEOUT_SECONDS": "2",
}


class Worker:
    """One `jobdesk worker` process with its stderr captured to a file."""

    def __init__(
        self, proc: subprocess.Popen[bytes] | ForkedProcess, log_path: Path, prefix: list[str]
    ) -> None:
        self.proc = proc
        self.log_path = log_path
        self.prefix = prefix

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 15) -> int:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
        self.proc.wait(10)


class Workers:
    """Starts workers for one test and kills whatever is left at the end."""

    def __init__(self, db_url: str, tmp_path: Path) -> None:
        self.db_url = db_url
        self.tmp_path = tmp_path
        self.started: list[Worker] = []

    def start(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        prefix: list[str] | None = None,
        wait_ready: bool = True,
    ) -> Worker:
        full_env = (
            {k: v for k, v in os.environ.items() if not k.startswith("JOBDESK_")}
            | FAST_ENV
            | {"JOBDESK_DATABASE_URL": self.db_url}
            | (env or {})
        )
        log_path = self.tmp_path / f"worker-{len(self.started)}.log"
        command = [*(prefix or []), str(JOBDESK), "worker", "--jobs", JOB_MODULE, *args]
        proc: subprocess.Popen[bytes] | ForkedProcess
        with log_path.open("wb") as log_file:
            if usable(prefix):
                proc = Zygote.get().spawn(command, env=full_env, cwd=REPO, stdout=log_file.fileno())
            else:
                proc = subprocess.Popen(
                    command, cwd=REPO, env=full_env, stdout=log_file, stderr=subprocess.STDOUT
                )
        worker = Worker(proc, log_path, prefix or [])
        self.started.append(worker)
        if wait_ready:
            wait_for(lambda: "worker_started" in worker.log() or not worker.alive(), 20)
            assert worker.alive(), worker.log()
        return worker

    def cleanup(self) -> None:
        for worker in self.started:
            worker.kill()


@contextmanager
def workers(db_url: str, tmp_path: Path) -> Iterator[Workers]:
    pool = Workers(db_url, tmp_path)
    try:
        yield pool
    finally:
        pool.cleanup()


def wait_for(predicate: Callable[[], Any], timeout: float, interval: float = 0.05) -> Any:
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def statuses(engine: sa.Engine) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(jobs.c.status, sa.func.count()).group_by(jobs.c.status))
        return {row[0]: row[1] for row in rows}


def job(engine: sa.Engine, job_id: int) -> sa.Row[Any]:
    with engine.connect() as conn:
        return conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).one()


def attempts_of(engine: sa.Engine, job_id: int) -> list[sa.Row[Any]]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                sa.select(job_attempts)
                .where(job_attempts.c.job_id == job_id)
                .order_by(job_attempts.c.attempt, job_attempts.c.id)
            )
        )


def effect_rows(engine: sa.Engine, prefix: str = "") -> list[sa.Row[Any]]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                sa.select(effects).where(effects.c.key.startswith(prefix)).order_by(effects.c.id)
            )
        )


def all_done(engine: sa.Engine, total: int, final: tuple[str, ...] = ("succeeded",)) -> bool:
    counts = statuses(engine)
    return sum(counts.get(s, 0) for s in final) == total


def all_succeeded(engine: sa.Engine, ids: list[int]) -> bool:
    """Whether every one of the jobs `ids` has succeeded."""
    with engine.connect() as conn:
        done = conn.execute(
            sa.select(sa.func.count()).where(jobs.c.id.in_(ids), jobs.c.status == "succeeded")
        ).scalar_one()
    return done == len(ids)
