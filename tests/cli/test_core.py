"""`jobdesk migrate / enqueue / stats` as a user runs them: a real subprocess.

SQLite needs no setup (a fresh working directory gets `jobdesk.db`); PostgreSQL is chosen
with JOBDESK_DATABASE_URL. Mistakes are one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.models import jobs
from tests import zygote

JOBDESK = str(Path(sys.executable).parent / "jobdesk")


def run(cwd: Path, *args: str, url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBDESK_")}
    if url:
        env["JOBDESK_DATABASE_URL"] = url
    return zygote.run([JOBDESK, *args], cwd=cwd, env=env)


@pytest.fixture
def target(backend: str, request: pytest.FixtureRequest) -> str | None:
    """None = the zero-setup default (SQLite in the working directory)."""
    if backend == "sqlite":
        return None
    url: str = request.getfixturevalue("db_url")
    return url


@pytest.mark.slow
def test_migrate_enqueue_stats_round_trip(tmp_path: Path, target: str | None) -> None:
    first = run(tmp_path, "migrate", url=target)
    assert first.returncode == 0, first.stderr
    again = run(tmp_path, "migrate", url=target)
    assert again.returncode == 0, again.stderr
    assert "already at" in again.stdout
    if target is None:
        assert (tmp_path / "jobdesk.db").exists()

    enq = run(
        tmp_path,
        "enqueue",
        "email.send",
        '{"to": "ana@example.com", "template": "welcome"}',
        "--idempotency-key",
        "welcome_email:user:42",
        "--priority",
        "2",
        "--run-at",
        "2020-01-01T00:00:00+01:00",
        url=target,
    )
    assert enq.returncode == 0, enq.stderr
    job_id = int(enq.stdout.strip())
    dup = run(
        tmp_path,
        "enqueue",
        "email.send",
        '{"to": "ana@example.com", "template": "welcome"}',
        "--idempotency-key",
        "welcome_email:user:42",
        url=target,
    )
    assert int(dup.stdout.strip()) == job_id
    other = run(
        tmp_path,
        "enqueue",
        "report.generate",
        '{"report": "activity"}',
        "--queue",
        "nightly",
        url=target,
    )
    assert other.returncode == 0, other.stderr

    stats = run(tmp_path, "stats", "--json", url=target)
    assert stats.returncode == 0, stats.stderr
    data = json.loads(stats.stdout)
    assert data["total"] == 2
    assert data["by_status"]["queued"] == 2
    assert data["by_queue"] == {"email": {"queued": 1}, "nightly": {"queued": 1}}
    assert data["oldest_queued_age_seconds"]["email"] > 3600 * 24 * 365

    text = run(tmp_path, "stats", url=target)
    assert text.returncode == 0
    assert "queued=2" in text.stdout

    engine = sa.create_engine(target or f"sqlite:///{tmp_path / 'jobdesk.db'}")
    with engine.connect() as conn:
        row = conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).one()
    engine.dispose()
    assert (row.queue, row.priority, row.payload["template"]) == ("email", 2, "welcome")


MISTAKES: list[tuple[tuple[str, ...], str]] = [
    (("enqueue", "email.send", "{not json"), "not valid JSON"),
    (("enqueue", "email.send", "[1, 2]"), "payload: must be a JSON object"),
    (("enqueue", "email.send", '{"x": NaN}'), "NaN is not allowed"),
    (("enqueue", "Bad Type!", "{}"), "job_type"),
    (("enqueue", "email.send", "{}", "--priority", "12"), "priority: must be between 0 and 9"),
    (("enqueue", "email.send", "{}", "--max-attempts", "0"), "max_attempts"),
    (("enqueue", "email.send", "{}", "--run-at", "tomorrow"), "ISO 8601"),
    (("enqueue", "email.send", "{}", "--run-at", "2030-01-01T00:00:00"), "time zone"),
    (("enqueue", "email.send", '{"s": "\\u0000"}'), "NUL"),
    # B14: a JSON literal Python cannot convert (> 4,300 digits) was a traceback.
    (("enqueue", "email.send", '{"n": ' + "9" * 5000 + "}"), "5,000-digit integer"),
    (("enqueue", "email.send", '{"x": 1e400}'), "too large"),
]


@pytest.mark.slow
def test_user_mistakes_are_one_line_without_traceback(tmp_path: Path, target: str | None) -> None:
    assert run(tmp_path, "migrate", url=target).returncode == 0
    for args, message in MISTAKES:
        result = run(tmp_path, *args, url=target)
        assert result.returncode != 0, args
        assert message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr
        assert result.stdout == ""
        error_lines = [line for line in result.stderr.splitlines() if line.startswith("Error")]
        assert len(error_lines) == 1, result.stderr
        # The command line was right, the value was not: no usage preamble around it.
        assert result.stderr.splitlines() == error_lines, result.stderr
    stats = json.loads(run(tmp_path, "stats", "--json", url=target).stdout)
    assert stats["total"] == 0  # nothing half-written


@pytest.mark.sqlite_only
@pytest.mark.slow
def test_missing_schema_and_bad_urls_are_explained(tmp_path: Path, backend: str) -> None:
    del backend
    no_schema = run(tmp_path, "stats")
    assert no_schema.returncode != 0
    assert "jobdesk migrate" in no_schema.stderr
    assert "Traceback" not in no_schema.stderr
    for url in ("mysql://x@y/z", "not a url"):
        bad = run(tmp_path, "stats", url=url)
        assert bad.returncode != 0
        assert "JOBDESK_DATABASE_URL" in bad.stderr
        assert "Traceback" not in bad.stderr
    unreachable = run(tmp_path, "stats", url="postgresql+psycopg://nobody@127.0.0.1:1/none")
    assert unreachable.returncode != 0
    assert "database unavailable" in unreachable.stderr
    assert "Traceback" not in unreachable.stderr
