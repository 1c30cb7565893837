"""`report.generate` / `report.chunk` / `report.assemble`: fan-out over keyset slices as a
batch, progress, exactly-once assembly (also under concurrent completion), retries,
operator actions — both DBs."""

from __future__ import annotations

import csv
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import enqueue
from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.models import jobs
from jobdesk.shared.reports.definitions import ACTIVITY, ReportDefinition, register_report
from jobdesk.shared.reports.runs import (
    cancel_remaining,
    chunk_jobs,
    claim_assembly,
    create_run,
    find_run_for_job,
    get_run,
    record_chunk_result,
    retry_failed_chunks,
    set_chunks_total,
)
from jobdesk.worker.testing import drain
from tests.factories import job_row

pytestmark = pytest.mark.usefixtures("jobs_env")

DAY = datetime(2026, 3, 1, tzinfo=UTC)
SEED_ROWS = 3000
CHUNK_ROWS = 500
REPORTS = ["reports"]


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBDESK_REPORT_CHUNK_ROWS", str(CHUNK_ROWS))


def seed(engine: sa.Engine, count: int = SEED_ROWS) -> Counter[tuple[str, str, str]]:
    """Source rows over three days and two statuses; returns the expected counts."""
    expected: Counter[tuple[str, str, str]] = Counter()
    rows = []
    for i in range(count):
        day = DAY + timedelta(days=i % 3, minutes=i % 600)
        status = "succeeded" if i % 4 else "dead"
        job_type = "seed.signup" if i % 2 else "seed.order"
        rows.append(
            {
                "job_type": job_type,
                "queue": "seed",
                "payload": {"template": "welcome"} if i % 2 else {},
                "status": status,
                "created_at": day,
                "finished_at": day,
            }
        )
        expected[(day.date().isoformat(), job_type, status)] += 1
    with engine.begin() as conn:
        conn.execute(sa.insert(jobs), rows)
    return expected


def request(engine: sa.Engine, report: str = "activity", **params: Any) -> int:
    with engine.begin() as conn:
        return enqueue(
            conn, "report.generate", {"report": report, "params": params, "requested_by": "ana"}
        )


def run_of(engine: sa.Engine, job_id: int) -> dict[str, Any]:
    with engine.connect() as conn:
        run = find_run_for_job(conn, job_id)
    assert run is not None
    return run


def read_csv(path: str) -> list[dict[str, str]]:
    with Path(path).open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_activity_report_fans_out_and_assembles_a_csv(engine: sa.Engine) -> None:
    expected = seed(engine)
    job_id = request(engine)
    drain(engine, queues=REPORTS)
    parent = None
    with engine.connect() as conn:
        parent = job_row(conn, job_id)
    run = run_of(engine, job_id)
    assert run["status"] == "succeeded"
    assert run["chunks_total"] == 7  # 3000 seed rows + the request job itself, 500 per chunk
    assert run["chunks_done"] == 7
    assert run["rows"] == SEED_ROWS + 1
    assert run["requested_by"] == "ana"
    assert run["size_bytes"] == Path(run["file_path"]).stat().st_size
    assert run["finished_at"] is not None
    assert run["expires_at"] - run["finished_at"] == timedelta(days=30)
    assert parent.status == "succeeded"
    assert parent.result["run_id"] == run["id"]
    assert parent.progress["done"] == parent.progress["total"] == 7
    assert parent.progress["run_status"] == "succeeded"
    lines = read_csv(run["file_path"])
    assert list(lines[0]) == ["day", "job_type", "status", "jobs"]
    found = {
        (line["day"], line["job_type"], line["status"]): int(line["jobs"])
        for line in lines
        if line["job_type"].startswith("seed.")
    }
    assert found == dict(expected)


@pytest.mark.slow
def test_progress_is_visible_mid_run(engine: sa.Engine) -> None:
    seed(engine)
    job_id = request(engine)
    drain(engine, queues=REPORTS, max_jobs=3)  # the request and two chunks
    run = run_of(engine, job_id)
    assert (run["status"], run["chunks_done"], run["chunks_total"]) == ("running", 2, 7)
    assert run["rows"] == 2 * CHUNK_ROWS
    with engine.connect() as conn:
        progress = job_row(conn, job_id).progress
    assert progress["done"] == 2
    assert progress["total"] == 7
    drain(engine, queues=REPORTS)
    assert run_of(engine, job_id)["status"] == "succeeded"


def test_a_re_run_of_the_request_does_not_fan_out_twice(engine: sa.Engine) -> None:
    seed(engine, 1200)
    job_id = request(engine)
    drain(engine, queues=REPORTS)
    with engine.begin() as conn:
        conn.execute(sa.update(jobs).where(jobs.c.id == job_id).values(status="queued"))
    drain(engine, queues=REPORTS)
    with engine.connect() as conn:
        count = conn.execute(
            sa.select(sa.func.count()).where(jobs.c.job_type == "report.chunk")
        ).scalar()
    assert count == run_of(engine, job_id)["chunks_total"] == 3


def test_concurrent_last_chunks_assemble_exactly_once(engine: sa.Engine) -> None:
    chunks = 8
    with engine.begin() as conn:
        now = db_now(conn)
        run_id = create_run(
            conn, job_id=None, report="activity", params={}, requested_by=None, now=now
        )
        set_chunks_total(conn, run_id, chunks)
    winners: list[int] = []
    barrier = threading.Barrier(chunks)
    errors: list[BaseException] = []

    def finish(index: int) -> None:
        try:
            barrier.wait(5)
            with engine.begin() as conn:
                progress = record_chunk_result(
                    conn, run_id, index, rows=1, data={"groups": [["x", 1]]}, now=now
                )
                if progress.complete and claim_assembly(conn, run_id):
                    winners.append(index)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=finish, args=(i,)) for i in range(chunks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert len(winners) == 1
    with engine.connect() as conn:
        run = get_run(conn, run_id)
    assert run is not None
    assert (run["status"], run["chunks_done"], run["rows"]) == ("assembling", chunks, chunks)
    # Recording a chunk again changes nothing.
    with engine.begin() as conn:
        again = record_chunk_result(conn, run_id, 0, rows=1, data={}, now=now)
        assert not again.recorded
        assert not claim_assembly(conn, run_id)
    assert again.chunks_done == chunks


def test_concurrent_chunk_jobs_through_the_worker_assemble_once(engine: sa.Engine) -> None:
    seed(engine, 2000)
    job_id = request(engine)
    drain(engine, queues=REPORTS, max_jobs=1)  # the fan-out only
    results: list[Any] = []

    def work() -> None:
        results.append(drain(engine, queues=REPORTS))

    threads = [threading.Thread(target=work) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    run = run_of(engine, job_id)
    assert run["status"] == "succeeded"
    with engine.connect() as conn:
        assemblies = conn.execute(
            sa.select(jobs.c.id, jobs.c.attempts, jobs.c.result).where(
                jobs.c.job_type == "report.assemble"
            )
        ).all()
    # The batch released its on_success once: one assembly, run once.
    assert len(assemblies) == 1
    assert assemblies[0].attempts == 1
    assert "assembled" in assemblies[0].result
    assert sum(r.succeeded for r in results) == run["chunks_total"] + 1


FLAKY: dict[str, int] = {"failures_left": 0}


def _flaky_keys(conn: sa.Connection) -> list[sa.ColumnElement[Any]]:
    if FLAKY["failures_left"] > 0:
        FLAKY["failures_left"] -= 1
        raise ConnectionError("source database hiccup")
    return [jobs.c.status]


FLAKY_REPORT = register_report(
    ReportDefinition(
        name="flaky_test",
        description="activity by status; fails while FLAKY says so",
        table=jobs,
        id_column="id",
        key_names=("status",),
        keys=_flaky_keys,
        parse_params=lambda params, now: {},
        where=lambda params: [jobs.c.queue == "seed"],
    )
)


def test_a_chunk_that_fails_retries_on_its_own(engine: sa.Engine) -> None:
    seed(engine, 1000)
    FLAKY["failures_left"] = 1
    job_id = request(engine, "flaky_test")
    first = drain(engine, queues=REPORTS)
    assert first.failed == 1
    assert run_of(engine, job_id)["status"] == "running"
    with engine.connect() as conn:
        later = db_now(conn) + timedelta(hours=1)
    drain(engine, queues=REPORTS, now=later)
    run = run_of(engine, job_id)
    assert run["status"] == "succeeded"
    lines = read_csv(run["file_path"])
    assert {line["status"]: int(line["count"]) for line in lines} == {"dead": 250, "succeeded": 750}


def test_dead_chunk_fails_the_run_and_retry_failed_chunks_recovers(engine: sa.Engine) -> None:
    seed(engine, 1000)
    FLAKY["failures_left"] = 100
    job_id = request(engine, "flaky_test")
    drain(engine, queues=REPORTS, max_jobs=1)
    run_id = run_of(engine, job_id)["id"]
    with engine.begin() as conn:
        conn.execute(
            sa.update(jobs).where(jobs.c.job_type == "report.chunk").values(max_attempts=1)
        )
    drain(engine, queues=REPORTS)
    run = run_of(engine, job_id)
    assert run["status"] == "failed"
    assert "source database hiccup" in run["error"]
    FLAKY["failures_left"] = 0
    with engine.begin() as conn:
        new_ids = retry_failed_chunks(conn, run_id, actor="ana", now=db_now(conn))
    assert len(new_ids) == 2
    assert run_of(engine, job_id)["status"] == "running"
    drain(engine, queues=REPORTS)
    assert run_of(engine, job_id)["status"] == "succeeded"
    with engine.connect() as conn:
        statuses = [c["status"] for c in chunk_jobs(conn, run_id)]
        audited = conn.execute(
            sa.select(sa.func.count()).where(audit_log.c.action == "report.retry_chunk")
        ).scalar()
    assert statuses.count("dead") == 2
    assert statuses.count("succeeded") == 2
    assert audited == 2


def test_cancel_remaining_stops_the_run(engine: sa.Engine) -> None:
    seed(engine, 1500)
    job_id = request(engine)
    drain(engine, queues=REPORTS, max_jobs=2)
    run_id = run_of(engine, job_id)["id"]
    with engine.begin() as conn:
        cancelled = cancel_remaining(conn, run_id, actor="ana", now=db_now(conn))
    with engine.connect() as conn:
        assembly = conn.execute(
            sa.select(jobs.c.id).where(jobs.c.job_type == "report.assemble")
        ).scalar_one()
    assert len(cancelled) == 4  # the three chunks not run, and the assembly they held
    assert assembly in cancelled
    drain(engine, queues=REPORTS)
    run = run_of(engine, job_id)
    assert run["status"] == "cancelled"
    assert run["file_path"] is None
    with engine.connect() as conn:
        assert (
            conn.execute(
                sa.select(sa.func.count()).where(audit_log.c.action == "report.cancel")
            ).scalar()
            == 1
        )


def test_nightly_activity_counts_one_days_signups(engine: sa.Engine) -> None:
    seed(engine, 600)
    job_id = request(engine, "nightly_activity", date="2026-03-02")
    drain(engine, queues=REPORTS)
    run = run_of(engine, job_id)
    assert run["status"] == "succeeded"
    lines = read_csv(run["file_path"])
    assert list(lines[0]) == ["date", "job_type", "subject", "status", "jobs"]
    signups = sum(
        int(line["jobs"])
        for line in lines
        if line["job_type"] == "seed.signup" and line["subject"] == "welcome"
    )
    assert signups == 100  # every other row of the 200 created on 2026-03-02
    assert {line["date"] for line in lines} == {"2026-03-02"}


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        ({"report": "nope"}, "unknown report 'nope'"),
        ({"report": "activity", "params": {"since": "yesterday"}}, "params.since"),
        ({"report": "activity", "params": {"colour": "red"}}, "unknown parameter(s): colour"),
        ({"report": "nightly_activity", "params": {"date": 5}}, "params.date"),
    ],
)
def test_bad_report_requests_are_dead(
    engine: sa.Engine, payload: dict[str, Any], error: str
) -> None:
    with engine.begin() as conn:
        job_id = enqueue(conn, "report.generate", payload)
    drain(engine, queues=REPORTS)
    with engine.connect() as conn:
        row = job_row(conn, job_id)
    assert row.status == "dead"
    assert error in row.last_error


def test_empty_source_still_produces_a_report(engine: sa.Engine) -> None:
    job_id = request(engine, "nightly_activity", date="2001-01-01")
    drain(engine, queues=REPORTS)
    run = run_of(engine, job_id)
    assert (run["status"], run["chunks_total"]) == ("succeeded", 0)
    assert read_csv(run["file_path"]) == []


def test_activity_definition_is_registered() -> None:
    assert ACTIVITY.columns == ("day", "job_type", "status", "jobs")
    assert FLAKY_REPORT.columns == ("status", "count")


def test_cells_that_would_start_a_formula_are_written_as_text(engine: sa.Engine) -> None:
    """CSV injection (OWASP): a subject from a payload must not become a formula."""
    hostile = ['=HYPERLINK("http://x","x")', "+1+1", "-2+3", "@SUM(A1)", "\tcmd", "plain"]
    with engine.begin() as conn:
        conn.execute(
            sa.insert(jobs),
            [
                {
                    "job_type": "seed.signup",
                    "queue": "seed",
                    "payload": {"template": subject},
                    "status": "succeeded",
                    "created_at": DAY,
                    "finished_at": DAY,
                }
                for subject in hostile
            ],
        )
    job_id = request(engine, "nightly_activity", date=DAY.date().isoformat())
    drain(engine, queues=REPORTS)
    lines = read_csv(run_of(engine, job_id)["file_path"])
    subjects = {line["subject"] for line in lines if line["job_type"] == "seed.signup"}
    assert subjects == {
        '\'=HYPERLINK("http://x","x")',
        "'+1+1",
        "'-2+3",
        "'@SUM(A1)",
        "'\tcmd",
        "plain",
    }
