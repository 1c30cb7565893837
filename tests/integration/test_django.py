"""Guide: Django (`docs/django.md`), with a real Django project on both databases.

Each step runs in a process of its own, as a project's would: `manage.py check` (the
missing migration is reported), `manage.py jobdesk migrate` (on the database of
Django's settings), the guide's view in `transaction.atomic()` (commit keeps the sign-up
and the job, an exception keeps neither, a savepoint rolled back takes its job, the
same key returns the same id, `using=` another alias), and `manage.py jobdesk worker`
running a job a Django view enqueued.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.worker.procs import REPO, job, wait_for

pytest.importorskip("django")

pytestmark = pytest.mark.slow

MANAGE = [sys.executable, "-m", "tests.integration.django_project.manage"]


@pytest.fixture
def django_env(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[dict[str, str]]:
    """A fresh, unmigrated database for the project (`TEST_DATABASE_URL`)."""
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'django.db'}"
    else:
        pg_url: str = request.getfixturevalue("pg_url")
        name = f"jobdesk_django_{os.getpid()}"
        admin = sa.create_engine(
            sa.make_url(pg_url).set(database="postgres"), isolation_level="AUTOCOMMIT"
        )
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        url = (
            sa.make_url(pg_url)
            .set(drivername="postgresql", database=name)
            .render_as_string(hide_password=False)
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBDESK_")}
    yield env | {
        "TEST_DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "tests.integration.django_project.settings",
    }
    if backend == "postgresql":
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MANAGE, *args],
        check=False,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def scenario(env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration.django_project.scenario"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def sqlalchemy_url(env: dict[str, str]) -> str:
    url = env["TEST_DATABASE_URL"]
    return url.replace("postgresql://", "postgresql+psycopg://", 1)


def test_the_django_guide(django_env: dict[str, str], backend: str) -> None:
    before = run(django_env, "check")
    assert before.returncode == 1, before.stdout + before.stderr
    assert "(jobdesk.E001) Jobdesk's tables are not in database 'default'" in before.stderr
    assert "run `python manage.py jobdesk migrate`" in before.stderr

    migrated = run(django_env, "jobdesk", "migrate")
    assert migrated.returncode == 0, migrated.stderr
    after = run(django_env, "check")
    assert after.returncode == 0, after.stderr
    assert "no issues" in after.stdout

    seen = scenario(django_env)
    first = seen["committed"]["job"]
    assert seen["committed"]["jobs"] == [[first, "email.send", "welcome_email:signup:1"]]
    assert seen["raised"] == "the plan's seat limit is reached"
    assert seen["after_rollback"] == {
        "signups": ["ana@example.com"],
        "jobs": [[first, "email.send", "welcome_email:signup:1"]],
    }
    assert seen["same_key"] == first
    many, outside = seen["many_on_other"], seen["outside_atomic"]
    assert seen["final_jobs"] == [
        [first, "email.send", "welcome_email:signup:1"],
        [many[0], "report.daily", None],
        [many[1], "t.x", None],
        [outside, "t.autocommit", None],
    ]  # no t.savepoint: its savepoint was rolled back


def test_manage_py_jobdesk_worker_runs_what_a_view_enqueued(
    django_env: dict[str, str], backend: str, tmp_path: Path
) -> None:
    assert run(django_env, "jobdesk", "migrate").returncode == 0
    enqueued = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django, os; django.setup(); "
            "from jobdesk.contrib.django import enqueue; "
            "print(enqueue('t.effect', {'key': 'from-django'}))",
        ],
        cwd=REPO,
        env=django_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    job_id = int(enqueued.stdout.strip().splitlines()[-1])
    log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen(
        [
            *MANAGE,
            "jobdesk",
            "worker",
            "--jobs",
            "tests.worker.jobmods.basic",
            "--poll-interval",
            "0.2",
        ],
        cwd=REPO,
        env=django_env | {"JOBDESK_LEASE_SECONDS": "5"},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    engine = sa.create_engine(sqlalchemy_url(django_env))
    try:
        wait_for(lambda: job(engine, job_id).status == "succeeded", 30)
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(30)
        log.close()
        engine.dispose()
    assert code == 0, (tmp_path / "worker.log").read_text()


def test_the_guide_shows_the_view_the_tests_run() -> None:
    guide = (REPO / "docs" / "django.md").read_text()
    (view,) = [
        b for b in re.findall(r"```python\n(.*?)```", guide, re.DOTALL) if "def sign_up" in b
    ]
    source = (REPO / "tests/integration/django_project/signups/views.py").read_text()
    shown = view[view.index("def sign_up") :]
    assert shown in source
