"""B16 / R16: two email.send jobs with the same (to, template, event_id) — the
double-clicked sign-up, enqueued without an idempotency key — running at the same
moment on two worker processes send ONE mail; the other job records who sent it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa

from jobdesk import NewJob, enqueue_many
from jobdesk.shared.core.models import jobs
from tests.worker.jobs.smtp_server import SmtpSink
from tests.worker.procs import Workers, all_succeeded, wait_for

ROUNDS = {"postgresql": 50, "sqlite": 10}


@pytest.mark.slow
def test_two_workers_racing_on_one_email_send_it_once(
    engine: sa.Engine, db_url: str, backend: str, smtp: SmtpSink, jobs_env: dict[str, str],
    tmp_path: Path,
) -> None:  # fmt: skip
    smtp.handler.delay_seconds = 0.15  # the first send is still in flight when the twin starts
    pool = Workers(db_url, tmp_path)
    try:
        for _ in range(2):
            pool.start("--concurrency", "1", "--queues", "email", env=jobs_env)
        rounds = ROUNDS[backend]
        for n in range(rounds):
            twin = {"to": f"ana{n}@example.com", "template": "welcome", "event_id": f"signup:{n}"}
            with engine.begin() as conn:
                pair = enqueue_many(conn, [NewJob("email.send", twin), NewJob("email.send", twin)])
            wait_for(lambda: all_succeeded(engine, pair), 30)  # noqa: B023 (waited for at once)
    finally:
        pool.cleanup()
    by_event = Counter(mail.recipients[0] for mail in smtp.received)
    assert len(smtp.received) == rounds, by_event
    assert set(by_event.values()) == {1}
    with engine.connect() as conn:
        results = [
            row.result
            for row in conn.execute(sa.select(jobs.c.result).where(jobs.c.job_type == "email.send"))
        ]
    skipped = [result for result in results if result.get("skipped")]
    assert len(skipped) == rounds
    assert all(result["skipped"] == "already sent" for result in skipped)
    assert sum(1 for result in skipped if result.get("sent_by_job")) == rounds
