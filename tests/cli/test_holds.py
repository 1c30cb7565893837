"""`jobdesk holds add|list|release` through the command line's own entry point, both
databases: a dry run says what a hold would take, the hold takes it and catches a new
job, `jobs show` tells why a job is held, release lets everything go; bad input is
named and writes nothing."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa

from jobdesk import enqueue
from jobdesk.shared.core.models import jobs
from jobdesk.shared.flow.models import holds
from jobdesk.worker.context import JobContext
from jobdesk.worker.registry import Registry, job
from tests.cli.test_batches import run

_reg = Registry()


@job("t.crm_sync", target=_reg)
def crm_sync(payload: dict[str, Any], ctx: JobContext) -> None:
    return None


def statuses(engine: sa.Engine) -> dict[int, tuple[str, int | None]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(jobs.c.id, jobs.c.status, jobs.c.held_by)).all()
    return {row.id: (row.status, row.held_by) for row in rows}


def test_hold_a_tenant_show_why_and_release(engine: sa.Engine, db_url: str) -> None:
    with engine.begin() as conn:
        mine = [
            enqueue(conn, "t.crm_sync", {"n": n}, concurrency_key="tenant:42") for n in range(3)
        ]
        other = enqueue(conn, "t.crm_sync", {}, concurrency_key="tenant:7")
    code, out = run(db_url, "holds", "add", "--concurrency-key", "tenant:42", "--reason",
                    "runaway import", "--dry-run")  # fmt: skip
    assert (code, out.strip()) == (0, (
        "would hold 3 jobs of tenant:42 now (and every matching job written until it is "
        "released)"
    )), out  # fmt: skip
    assert all(held is None for _, held in statuses(engine).values())

    code, out = run(db_url, "holds", "add", "--concurrency-key", "tenant:42", "--reason",
                    "runaway import", "--for", "2h", "--json")  # fmt: skip
    assert code == 0, out
    placed = json.loads(out)
    assert (placed["holds"], placed["held"], placed["until"] is not None) == ("tenant:42", 3, True)
    with engine.begin() as conn:
        late = enqueue(conn, "t.crm_sync", {}, concurrency_key="tenant:42")
    found = statuses(engine)
    assert {found[i] for i in [*mine, late]} == {("waiting", placed["id"])}
    assert found[other] == ("queued", None)

    code, out = run(db_url, "jobs", "show", str(late))
    assert code == 0, out
    assert "held: quarantine of tenant:42 by cli:" in out
    assert "— runaway import (until " in out

    code, out = run(db_url, "holds", "list")
    assert code == 0, out
    assert f"#{placed['id']}  tenant:42  4 jobs held, until " in out

    code, out = run(db_url, "holds", "release", str(placed["id"]), "--reason", "import fixed")
    assert (code, out.strip()) == (0, f"hold #{placed['id']} released: 4 jobs back in line")
    assert set(statuses(engine).values()) == {("queued", None)}
    code, out = run(db_url, "holds", "list", "--all", "--json")
    (listed,) = json.loads(out)
    assert (listed["released_by"] or "").startswith("cli:")
    code, out = run(db_url, "holds", "release", str(placed["id"]))
    assert code == 1
    assert f"#{placed['id']} is not an active hold" in out


def test_bad_holds_are_named_and_write_nothing(engine: sa.Engine, db_url: str) -> None:
    cases = [
        (["--reason", "x"], "name what to hold"),
        (["--concurrency-key", "a", "--group-key", "b", "--reason", "x"], "name what to hold"),
        (["--payload", "account_id", "--reason", "x"], "key=value"),
        (["--concurrency-key", "a", "--reason", "  "], "reason: says why"),
        (["--concurrency-key", "a", "--reason", "x", "--for", "soon"], "is not a duration"),
        (["--concurrency-key", "a", "--reason", "x", "--until", "2001-01-01T00:00Z"],
         "is already past"),
        (["--concurrency-key", "a", "--reason", "x", "--for", "200d"], "more than 90 days"),
        (["--concurrency-key", "a", "--reason", "a\x00b"], "must not contain control"),
    ]  # fmt: skip
    for args, message in cases:
        code, out = run(db_url, "holds", "add", *args)
        assert code in (1, 2), (args, out)
        assert message in out, (args, out)
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(holds)).scalar_one() == 0
