"""`jobdesk keys rotate` while two workers run the jobs whose secrets it seals again:
every job that ran read its own value (no attempt failed on its secret), and afterwards
the new key alone opens every stored secret (10,000 jobs on PostgreSQL, 2,000 on
SQLite)."""

from __future__ import annotations

import os

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet

from jobdesk import NewJob, enqueue_many
from jobdesk.shared.core.models import job_attempts
from jobdesk.shared.secrets.keys import sealer_for
from jobdesk.shared.secrets.models import job_secrets
from tests import zygote
from tests.worker.procs import JOBDESK, Workers, statuses

pytestmark = pytest.mark.slow

OLD, NEW = Fernet.generate_key().decode(), Fernet.generate_key().decode()
JOBS = {"postgresql": 10_000, "sqlite": 2_000}


def test_rotation_under_running_workers(
    engine: sa.Engine, db_url: str, backend: str, procs: Workers, monkeypatch: pytest.MonkeyPatch
) -> None:
    total = JOBS[backend]
    monkeypatch.setenv("JOBDESK_ENCRYPTION_KEYS", OLD)
    for start in range(0, total, 1000):
        batch = [
            NewJob("t.secret_check", {"expect": f"t{n}"}, queue="secrets",
                   secrets={"token": f"t{n}"})
            for n in range(start, start + 1000)
        ]  # fmt: skip
        with engine.begin() as conn:
            enqueue_many(conn, batch)
    both = f"{NEW},{OLD}"
    for _ in range(2):
        procs.start(
            "--jobs", "tests.worker.jobmods.secretive", env={"JOBDESK_ENCRYPTION_KEYS": both}
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBDESK_")}
    env |= {"JOBDESK_DATABASE_URL": db_url, "JOBDESK_ENCRYPTION_KEYS": both}
    rotated = zygote.run([str(JOBDESK), "keys", "rotate", "--batch", "500"], env=env, timeout=120)
    assert rotated.returncode == 0, rotated.stderr
    assert rotated.stdout.strip() == f"{total:,} secrets sealed with the first key"
    procs.cleanup()  # the workers ran all through the rotation
    ran = statuses(engine)
    with engine.connect() as conn:
        errors = list(
            conn.execute(
                sa.select(job_attempts.c.error).where(job_attempts.c.error.is_not(None))
            ).scalars()
        )
    # A loaded machine may rescue a job whose lease ran out (`failed`, to be retried):
    # that is the lease at work. What must never happen is a secret that did not open.
    assert "dead" not in ran, ran
    unopened = [e for e in errors if "secret" in e or "JOBDESK_ENCRYPTION_KEYS" in e]
    assert unopened == []
    assert ran.get("succeeded", 0) > 0
    only_new = sealer_for(NEW)
    with engine.connect() as conn:
        sealed = list(conn.execute(sa.select(job_secrets.c.job_id, job_secrets.c.sealed)))
    assert len(sealed) == total
    for job_id, value in sealed:
        only_new.open(value, f"job {job_id}")
