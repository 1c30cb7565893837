"""`jobdesk batches list|show|cancel`, `jobdesk jobs show` telling a job's batch, its
dependencies and why it waits, and `jobdesk enqueue --after / --debounce` — on both
databases, through the command line's own entry point."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from jobdesk import NewJob, enqueue, enqueue_batch
from jobdesk.cli import cli
from jobdesk.cli.batches import STATUSES
from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.core.claim import claim
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.states import JobStatus
from jobdesk.shared.workflows.models import batches
from jobdesk.worker.context import JobContext
from jobdesk.worker.registry import Registry, job
from jobdesk.worker.testing import drain
from tests.factories import job_row


def run(db_url: str, *args: str) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBDESK_")}
    result = CliRunner().invoke(cli, ["--database-url", db_url, *args], env=env)
    return result.exit_code, result.output


@pytest.fixture
def reg() -> Registry:
    """`t.child` fails when its payload says so, with a credential in its error."""
    reg = Registry()

    @job("t.child", target=reg, max_attempts=1)
    def child(payload: dict[str, Any], ctx: JobContext) -> dict[str, int]:
        if payload.get("fail"):
            raise RuntimeError(f"chunk {payload['n']} failed: password=hunter2")
        return {"n": payload["n"]}

    return reg


def children(n: int, fail: frozenset[int] = frozenset()) -> list[NewJob]:
    return [NewJob("t.child", {"n": i, "fail": i in fail}) for i in range(n)]


def callbacks() -> dict[str, NewJob]:
    return {"on_success": NewJob("t.assemble", {}), "on_finish": NewJob("t.notify", {})}


def test_list_newest_first_with_pages_and_json(
    engine: sa.Engine, db_url: str, reg: Registry
) -> None:
    with engine.begin() as conn:
        first = enqueue_batch(conn, children(3, fail=frozenset({1})), name="nightly 2030-06-01")
    drain(engine, registry=reg)  # the first batch's three children
    with engine.begin() as conn:
        second = enqueue_batch(conn, children(2))

    code, out = run(db_url, "batches", "list")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith(f"#{second.id} ")
    assert "running" in lines[0]
    assert "0/2 final, 0 succeeded" in lines[0]
    assert lines[1].startswith(f"#{first.id} ")
    assert "finished" in lines[1]
    assert "3/3 final, 2 succeeded" in lines[1]
    assert lines[1].endswith("nightly 2030-06-01")

    code, out = run(db_url, "batches", "list", "--limit", "1")
    assert code == 0
    assert out.splitlines()[-1] == f"more: jobdesk batches list --before {second.id}"
    code, out = run(db_url, "batches", "list", "--before", str(second.id), "--json")
    [row] = json.loads(out)
    assert (row["id"], row["name"], row["state"]) == (first.id, "nightly 2030-06-01", "finished")
    assert (row["total"], row["finished"], row["succeeded"]) == (3, 3, 2)
    assert row["finished_at"] is not None
    assert row["cancelled_at"] is None

    code, out = run(db_url, "batches", "list", "--before", str(first.id))
    assert (code, out.strip()) == (0, f"no batches before #{first.id}")


def test_show_counts_callbacks_and_children(engine: sa.Engine, db_url: str, reg: Registry) -> None:
    with engine.begin() as conn:
        batch = enqueue_batch(conn, children(3, fail=frozenset({1})), **callbacks(), name="june")
    drain(engine, registry=reg)
    dead = batch.job_ids[1]

    code, out = run(db_url, "batches", "show", str(batch.id))
    assert code == 0, out
    assert out.splitlines()[0] == (
        f'batch #{batch.id} "june": finished, 3 of 3 children final, 2 succeeded'
    )
    assert "children by status: succeeded=2 dead=1" in out
    # A dead child holds on_success; every child final released on_finish.
    assert f"on_success: job #{batch.on_success_job_id} t.assemble waiting" in out
    assert f"on_finish:  job #{batch.on_finish_job_id} t.notify queued" in out
    child_lines = [line for line in out.splitlines() if line.startswith("  #")]
    assert [int(line.split()[0][1:]) for line in child_lines] == batch.job_ids
    [dead_line] = [line for line in child_lines if line.startswith(f"  #{dead} ")]
    assert "dead" in dead_line
    assert "chunk 1 failed: password=***" in dead_line  # masked, as on every page
    assert "hunter2" not in out

    code, out = run(db_url, "batches", "show", str(batch.id), "--status", "dead", "--json")
    assert code == 0
    shown = json.loads(out)
    assert shown["batch"]["name"] == "june"
    assert shown["counts"] == {"succeeded": 2, "dead": 1}
    assert {c["kind"]: c["status"] for c in shown["callbacks"]} == {
        "on_success": "waiting",
        "on_finish": "queued",
    }
    [child] = shown["children"]
    assert (child["id"], child["status"], child["attempts"]) == (dead, "dead", 1)
    assert "hunter2" not in child["last_error"]
    assert shown["more_children"] is False


def test_show_says_when_only_the_first_page_of_children_is_listed(
    engine: sa.Engine, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("jobdesk.shared.workflows.queries.CHILDREN_PAGE", 2)
    with engine.begin() as conn:
        batch = enqueue_batch(conn, children(3))
    code, out = run(db_url, "batches", "show", str(batch.id))
    assert code == 0
    assert len([line for line in out.splitlines() if line.startswith("  #")]) == 2
    assert "first 2 shown; narrow with --status" in out
    code, out = run(db_url, "batches", "show", str(batch.id), "--json")
    assert json.loads(out)["more_children"] is True
    code, out = run(db_url, "batches", "show", str(batch.id), "--status", "running")
    assert (code, out.splitlines()[-1]) == (0, "no children running")


def test_cancel_cancels_what_has_not_started_and_asks_running_ones_to_stop(
    engine: sa.Engine, db_url: str
) -> None:
    with engine.begin() as conn:
        batch = enqueue_batch(conn, children(3), **callbacks())
        [running] = claim(conn, worker_id="w-1", limit=1, job_types=["t.child"])
    not_started = [job_id for job_id in batch.job_ids if job_id != running.id]

    code, out = run(db_url, "batches", "cancel", str(batch.id), "--reason", "wrong month")
    assert code == 0, out
    assert out.splitlines() == [
        f"batch #{batch.id} cancelled",
        f"cancelled 2 not started: #{not_started[0]} #{not_started[1]}",
        f"cancelled on_success job #{batch.on_success_job_id}",
        out.splitlines()[3],  # the hard-stop time depends on the clock
        f"on_finish job #{batch.on_finish_job_id} runs once every child is final",
    ]
    assert out.splitlines()[3].startswith("asked 1 running to stop (their workers end them")
    assert out.splitlines()[3].endswith(f": #{running.id}")

    with engine.connect() as conn:
        row = conn.execute(sa.select(batches).where(batches.c.id == batch.id)).one()
        assert row.cancel_reason == "wrong month"
        assert str(row.cancelled_by).startswith("cli")
        assert job_row(conn, running.id).cancel_reason == "wrong month"
        assert job_row(conn, not_started[0]).status == "cancelled"
        audit = conn.execute(
            sa.select(audit_log.c.action, audit_log.c.subject, audit_log.c.reason).where(
                audit_log.c.action == "batch.cancel"
            )
        ).all()
    assert [tuple(a) for a in audit] == [("batch.cancel", f"batch:{batch.id}", "wrong month")]

    code, out = run(db_url, "batches", "cancel", str(batch.id), "--reason", "again")
    assert (code, out.strip()) == (
        1,
        f"Error: batch #{batch.id} was already cancelled by {row.cancelled_by}: wrong month",
    )
    code, out = run(db_url, "batches", "show", str(batch.id))
    assert f"cancelled by {row.cancelled_by}" in out
    assert out.splitlines()[0].endswith("cancelled, 2 of 3 children final, 0 succeeded")


def test_mistakes_are_one_line_and_change_nothing(
    engine: sa.Engine, db_url: str, reg: Registry
) -> None:
    for args in (("show", "999"), ("cancel", "999", "--reason", "x")):
        code, out = run(db_url, "batches", *args)
        assert (code, out.strip()) == (1, "Error: batch #999 does not exist")

    with engine.begin() as conn:
        done_batch = enqueue_batch(conn, children(2))
    drain(engine, registry=reg)

    code, out = run(db_url, "batches", "cancel", str(done_batch.id))
    assert code == 2
    assert "Missing option '--reason'" in out
    code, out = run(db_url, "batches", "cancel", str(done_batch.id), "--reason", "  ")
    assert code == 1
    assert out.startswith("Error: reason: is required")
    code, out = run(db_url, "batches", "cancel", str(done_batch.id), "--reason", "late")
    assert (code, out.strip()) == (
        1,
        f"Error: batch #{done_batch.id} is already succeeded: every child is final (succeeded=2)",
    )
    code, out = run(db_url, "batches", "show", "0")
    assert code == 2
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(audit_log)).scalar() == 0
        assert (
            conn.execute(
                sa.select(sa.func.count()).where(batches.c.cancelled_at.is_not(None))
            ).scalar()
            == 0
        )


def test_jobs_show_tells_the_batch_the_dependencies_and_why_a_job_waits(
    engine: sa.Engine, db_url: str, reg: Registry
) -> None:
    with engine.begin() as conn:
        batch = enqueue_batch(conn, children(2, fail=frozenset({0})), **callbacks(), name="june")
        dependent = enqueue(conn, "t.sync", {}, after=batch.job_ids)
    drain(engine, registry=reg)
    dead, ok = batch.job_ids

    code, out = run(db_url, "jobs", "show", str(dependent))
    assert code == 0, out
    assert out.splitlines()[0] == f"job #{dependent}  t.sync  queue default  waiting"
    assert f"runs after: #{dead} t.child dead · #{ok} t.child succeeded" in out
    assert out.splitlines()[-1] == (
        f"waiting for dead job #{dead} (retry it to go on; ignoring it cancels this)"
    )

    code, out = run(db_url, "jobs", "show", str(dead))
    assert f'batch #{batch.id} "june" (a child): finished, 2 of 2 children final' in out
    assert f"needed by: #{dependent} t.sync waiting" in out
    assert "last error: RuntimeError: chunk 0 failed: password=***" in out

    code, out = run(db_url, "jobs", "show", str(batch.on_success_job_id), "--json")
    shown = json.loads(out)
    assert (shown["status"], shown["callback_of"]) == ("waiting", "on_success")
    assert shown["batch"]["id"] == batch.id
    assert shown["waiting_reason"] == (
        f"waiting for dead job #{dead} of batch #{batch.id} (retry it to go on)"
    )
    code, out = run(db_url, "jobs", "show", str(ok), "--json")
    assert json.loads(out)["result"] == {"n": 1}

    code, out = run(db_url, "dead", "ignore", str(dead), "--reason", "test data")
    assert code == 0, out
    code, out = run(db_url, "jobs", "show", str(dependent))
    assert out.splitlines()[0] == f"job #{dependent}  t.sync  queue default  cancelled"
    assert f"job #{dead} it waited for was ignored: test data" in out
    code, out = run(db_url, "jobs", "show", str(dead))
    assert "ignored by " in out
    assert out.splitlines()[0].endswith("dead (ignored)")

    code, out = run(db_url, "jobs", "show", "999")
    assert (code, out.strip()) == (1, "Error: job #999 does not exist (it may have been pruned)")


def test_status_choices_are_the_job_statuses() -> None:
    assert set(STATUSES) == {status.value for status in JobStatus}


def test_enqueue_takes_after_and_key_windows(engine: sa.Engine, db_url: str) -> None:
    code, out = run(db_url, "enqueue", "t.child", '{"n": 1}')
    assert code == 0, out
    first = int(out)
    code, out = run(db_url, "enqueue", "t.child", '{"n": 2}', "--after", str(first))
    assert code == 0, out
    dependent = int(out)
    window = ("--idempotency-key", "k", "--debounce", "30")
    code, out = run(db_url, "enqueue", "t.child", '{"n": 3}', *window)
    code_again, out_again = run(db_url, "enqueue", "t.child", '{"n": 4}', *window)
    assert (code, code_again) == (0, 0)
    assert out == out_again  # one debounced job
    with engine.connect() as conn:
        status = dict(conn.execute(sa.select(jobs.c.id, jobs.c.status)).all())
        payload = conn.execute(sa.select(jobs.c.payload).where(jobs.c.id == int(out))).scalar()
    assert status[dependent] == "waiting"
    assert payload == {"n": 4}
    code, out = run(db_url, "enqueue", "t.child", "{}", "--debounce", "5")
    assert code == 1
    assert "debounce: needs an idempotency_key" in out
