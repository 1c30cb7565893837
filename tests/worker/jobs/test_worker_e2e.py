"""The built-in types through the real `jobdesk` CLI and `jobdesk worker` subprocesses:
enqueue from the command line, run, and F2 with a real SIGKILL between the side effect
and the completion (one applied webhook per webhook-id, one Message-ID per mail)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.models import jobs
from jobdesk.shared.reports.models import report_runs
from tests import zygote
from tests.worker.jobs.receiver import Receiver
from tests.worker.jobs.smtp_server import SmtpSink

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("jobs_env")]

JOBDESK = str(Path(sys.executable).parent / "jobdesk")


def cli(db_url: str, *args: str) -> str:
    env = {**os.environ, "JOBDESK_DATABASE_URL": db_url}
    done = zygote.run([JOBDESK, *args], env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def wait_for(predicate: Callable[[], Any], timeout: float = 30, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what or predicate}")


class Workers:
    def __init__(self, db_url: str, tmp_path: Path) -> None:
        self.db_url = db_url
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Any] = []

    def start(self, *extra: str) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "JOBDESK_DATABASE_URL": self.db_url,
            "JOBDESK_REAPER_INTERVAL_SECONDS": "0.3",
            "JOBDESK_HEARTBEAT_SECONDS": "0.3",
        }
        log = (self.tmp_path / f"worker-{len(self.procs)}.log").open("wb")
        self.logs.append(log)
        proc = subprocess.Popen(
            [JOBDESK, "worker", "--poll-interval", "0.1", "--lease", "1", *extra],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        for log in self.logs:
            log.close()

    def output(self) -> str:
        return "\n".join(
            path.read_text(errors="replace") for path in sorted(self.tmp_path.glob("worker-*.log"))
        )


@pytest.fixture
def workers(db_url: str, tmp_path: Path) -> Iterator[Workers]:
    pool = Workers(db_url, tmp_path)
    yield pool
    pool.stop_all()


def statuses(engine: sa.Engine) -> dict[str, list[str]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(jobs.c.job_type, jobs.c.status).order_by(jobs.c.id))
        found: dict[str, list[str]] = {}
        for job_type, status in rows:
            found.setdefault(job_type, []).append(status)
        return found


def test_all_three_types_from_the_cli_through_a_real_worker(
    engine: sa.Engine,
    db_url: str,
    smtp: SmtpSink,
    receiver: Receiver,
    workers: Workers,
    tmp_path: Path,
) -> None:
    out = cli(db_url, "endpoints", "add", "crm", receiver.url("/ok"))
    secret = out.strip().splitlines()[-1]
    assert secret.startswith("whsec_")
    receiver.secrets.append(secret)
    assert "crm" in cli(db_url, "endpoints", "list")
    cli(db_url, "enqueue", "email.send",
        '{"to": "ana@example.com", "template": "welcome", "event_id": "signup:1"}',
        "--idempotency-key", "welcome_email:user:1")  # fmt: skip
    cli(db_url, "enqueue", "webhook.deliver",
        '{"endpoint": "crm", "event": "user.created", "data_ref": {"user_id": 1}}')  # fmt: skip
    cli(db_url, "enqueue", "report.generate", '{"report": "activity"}')
    proc = workers.start("--concurrency", "4")

    def all_done() -> bool:
        found = statuses(engine)
        return bool(found.get("report.chunk")) and all(
            s == "succeeded" for group in found.values() for s in group
        )

    wait_for(all_done, what="every job succeeded")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0
    assert len(smtp.received) == 1
    assert [s.verified for s in receiver.seen] == [True]
    with engine.connect() as conn:
        run = conn.execute(sa.select(report_runs)).one()
    assert run.status == "succeeded"
    assert Path(run.file_path).read_text().startswith("day,job_type,status,jobs")


def _make_due(engine: sa.Engine, job_id: int) -> None:
    """Skip the backoff wait of the retry (as if its time had come)."""
    with engine.begin() as conn:
        now = db_now(conn)
        conn.execute(
            sa.update(jobs)
            .where(jobs.c.id == job_id, jobs.c.status == "failed")
            .values(next_run_at=now)
        )


def _job(engine: sa.Engine, job_id: int) -> Any:
    with engine.connect() as conn:
        return conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).one()


def _enqueue(db_url: str, job_type: str, payload: str) -> int:
    return int(cli(db_url, "enqueue", job_type, payload).strip())


def test_a_hostile_400_body_neither_stalls_nor_kills_the_worker(
    engine: sa.Engine,
    db_url: str,
    receiver: Receiver,
    workers: Workers,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 23 #1: masking a receiver's 64 KiB 400 body held the GIL for ~23 s; the
    watchdog killed the worker and the job stayed `running`. Now the job is dead at once
    and the same worker goes on with the next one."""
    for name, path in (("hostile", "/hostile"), ("crm", "/ok")):
        out = cli(db_url, "endpoints", "add", name, receiver.url(path))
        receiver.secrets.append(out.strip().splitlines()[-1])
    hostile = _enqueue(db_url, "webhook.deliver", '{"endpoint": "hostile", "event": "x"}')
    monkeypatch.setenv("JOBDESK_WATCHDOG_SECONDS", "5")  # a stall ends the worker quickly
    proc = workers.start("--queues", "webhooks", "--concurrency", "1")
    wait_for(lambda: _job(engine, hostile).status == "dead", timeout=30, what="dead")
    after = _enqueue(db_url, "webhook.deliver", '{"endpoint": "crm", "event": "y"}')
    wait_for(lambda: _job(engine, after).status == "succeeded", timeout=30, what="next job")
    assert proc.poll() is None, workers.output()  # the watchdog did not have to end it
    assert "answered HTTP 400" in _job(engine, hostile).last_error


def test_sigkill_after_the_webhook_was_applied(
    engine: sa.Engine, db_url: str, receiver: Receiver, workers: Workers
) -> None:
    receiver.secrets.append(
        cli(db_url, "endpoints", "add", "crm", receiver.url("/hook")).strip().splitlines()[-1]
    )
    job_id = _enqueue(db_url, "webhook.deliver", '{"endpoint": "crm", "event": "order.paid"}')
    first = workers.start("--queues", "webhooks")
    receiver.on_apply["/hook"] = lambda: os.kill(first.pid, signal.SIGKILL)
    assert first.wait(30) == -signal.SIGKILL
    assert _job(engine, job_id).status == "running"
    workers.start("--queues", "webhooks")
    lost = wait_for(lambda: _job(engine, job_id).status == "failed", what="reaper")
    assert lost
    assert "worker lost" in _job(engine, job_id).last_error
    _make_due(engine, job_id)
    wait_for(lambda: _job(engine, job_id).status == "succeeded", what="redelivery")
    first_seen, second_seen = receiver.seen
    assert first_seen.webhook_id == second_seen.webhook_id
    assert receiver.applied[first_seen.webhook_id] == 1


def test_sigkill_after_the_mail_was_accepted(
    engine: sa.Engine, db_url: str, smtp: SmtpSink, workers: Workers
) -> None:
    job_id = _enqueue(
        db_url, "email.send", '{"to": "ana@example.com", "template": "welcome", "event_id": "e1"}'
    )
    first = workers.start("--queues", "email")
    smtp.handler.on_data.append(lambda: os.kill(first.pid, signal.SIGKILL))
    assert first.wait(30) == -signal.SIGKILL
    workers.start("--queues", "email")
    wait_for(lambda: _job(engine, job_id).status == "failed", what="reaper")
    _make_due(engine, job_id)
    wait_for(lambda: _job(engine, job_id).status == "succeeded", what="resend")
    ids = [mail.message_id for mail in smtp.received]
    assert len(ids) == 2
    assert ids[0] == ids[1], "the repeat carries the same Message-ID"
