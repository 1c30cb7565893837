"""Batches in a real browser, on a phone and a laptop, light and dark: the list and a
batch's page render without anything out of reach, its dependency graph is drawn, an
operator retries the dead child through the bulk preview and cancels the batch; a viewer
follows a waiting callback's "why" line to its batch and finds no action there.

The batch (`seed_batch`): an extract job, then six parts enqueued `after=` it, with an
on_success and an on_finish callback. The extract and three parts have run — one part
went dead — so the batch is running, its on_success waits for the dead part, and the
graph has an arrow from the extract to each part. The page tour (test_every_page.py)
seeds the same batch.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import NewJob, enqueue, enqueue_batch
from jobdesk.shared.core.models import jobs, workers
from jobdesk.worker.context import JobContext
from jobdesk.worker.registry import Registry, job
from jobdesk.worker.testing import drain
from tests.e2e.conftest import Seeded
from tests.e2e.screens import SCREENS, log_in, open_screen, screen_problems

pytestmark = [pytest.mark.e2e, pytest.mark.one_database]

Server = tuple[str, Seeded]
BATCH_NAME = "June invoices"


@dataclass(frozen=True)
class SeededBatch:
    id: int
    extract: int
    parts: list[int]
    dead: int
    on_success: int
    on_finish: int


def _registry() -> Registry:
    reg = Registry()

    @job("export.extract", target=reg, max_attempts=1)
    def extract(payload: dict[str, Any], ctx: JobContext) -> dict[str, int]:
        return {"rows": 1200}

    @job("export.part", target=reg, max_attempts=1)
    def part(payload: dict[str, Any], ctx: JobContext) -> dict[str, int]:
        if payload.get("fail"):
            raise RuntimeError(f"invoice PDF service answered 502 for part {payload['n']}")
        return {"n": payload["n"]}

    @job("export.merge", target=reg, max_attempts=1)
    def merge(payload: dict[str, Any], ctx: JobContext) -> None:
        return None

    return reg


def seed_batch(engine: sa.Engine) -> SeededBatch:
    """The batch of the module docstring, run by a worker that knows its job types."""
    reg = _registry()
    with engine.begin() as conn:
        conn.execute(
            sa.insert(workers).values(
                id="app-2:5151:7a2e", host="app-2", pid=5151, queues=["exports"], concurrency=4,
                version="0.1.0", last_seen_at=datetime.now(UTC),
                job_types={name: {} for name in reg.names()},
            )
        )  # fmt: skip
        extract = enqueue(conn, "export.extract", {"month": "2030-06"}, queue="exports")
        parts = [
            NewJob("export.part", {"n": n, "fail": n == 1}, queue="exports", after=[extract])
            for n in range(6)
        ]
        merge = NewJob("export.merge", {"month": "2030-06"}, queue="exports")
        batch = enqueue_batch(conn, parts, on_success=merge, on_finish=merge, name=BATCH_NAME)
    drain(engine, registry=reg, queues=["exports"], max_jobs=4)
    with engine.connect() as conn:
        dead = conn.execute(
            sa.select(jobs.c.id).where(jobs.c.batch_id == batch.id, jobs.c.status == "dead")
        ).scalar_one()
    assert batch.on_success_job_id is not None
    assert batch.on_finish_job_id is not None
    return SeededBatch(
        batch.id, extract, batch.job_ids, dead, batch.on_success_job_id, batch.on_finish_job_id
    )


@pytest.fixture(params=SCREENS, ids="-".join)
def screen(request: pytest.FixtureRequest, browser: Any) -> Iterator[Any]:
    width, scheme = request.param
    with open_screen(browser, width, scheme) as page:
        yield page


def scrolled_sideways(page: Any) -> list[str]:
    """Boxes of these pages that would hide part of a row sideways (a badge, a link):
    on a phone every table is a list of cards, and the graph shrinks to fit."""
    return list(
        page.evaluate(
            """() => [...document.querySelectorAll('.table-wrap, .graph-frame, .panel')]
                 .filter((el) => el.scrollWidth > el.clientWidth + 1)
                 .map((el) => `${el.className}: ${el.scrollWidth} > ${el.clientWidth}`)"""
        )
    )


def checked(page: Any, name: str) -> list[str]:
    return screen_problems(page, name) + [f"{name}: {line}" for line in scrolled_sideways(page)]


def flash(page: Any, text: str) -> str:
    message = page.locator(".flash-success, .flash-info", has_text=text)
    message.wait_for()
    return str(message.inner_text())


def open_batches(page: Any) -> None:
    """Through the main navigation (its menu on a phone)."""
    menu = page.get_by_role("button", name="Menu")
    if menu.is_visible():
        menu.click()
    page.locator("#main-nav").get_by_role("link", name="Batches", exact=True).click()
    page.wait_for_url(re.compile(r".*/batches$"))


def test_an_operator_follows_a_batch_retries_its_dead_child_and_cancels_it(
    screen: Any, live_server: Server, engine: sa.Engine
) -> None:
    page = screen
    base, _ = live_server
    batch = seed_batch(engine)
    problems: list[str] = []
    log_in(page, base, "sam")
    open_batches(page)
    row = page.locator(f"#batch-{batch.id}")
    assert BATCH_NAME in row.inner_text()
    assert "2 of 6 children succeeded, 1 dead or cancelled, 3 to go" in row.inner_text()
    assert row.locator(".badge.batch-running").is_visible()
    assert row.locator("svg.progress-bar").is_visible()
    problems += checked(page, "batches")

    row.get_by_role("link", name=f"#{batch.id}").click()
    page.wait_for_url(f"{base}/batches/{batch.id}")
    assert page.locator("h1").inner_text() == f"Batch #{batch.id} · {BATCH_NAME}"
    graph = page.locator("#graph svg")
    assert graph.is_visible()
    assert page.locator("#graph a.node").count() == 7
    assert page.locator("#graph path.edge").count() == 6
    assert page.locator("#graph a.node.status-dead").count() == 1
    # the graph shrinks to the panel instead of scrolling the page sideways
    box = graph.bounding_box()
    assert box is not None
    assert box["x"] + box["width"] <= page.viewport_size["width"]
    assert page.locator("#children tbody tr").count() == 6
    problems += checked(page, "batch")

    # Only the dead children, then back to all of them.
    page.locator("#children").get_by_role("link", name="dead 1").click()
    page.wait_for_url(re.compile(rf".*/batches/{batch.id}\?status=dead#children$"))
    assert page.locator("#children tbody tr").count() == 1
    assert "invoice PDF service answered 502" in page.locator("#children tbody").inner_text()
    page.locator("#children").get_by_role("link", name="all", exact=True).click()
    page.wait_for_url(re.compile(rf".*/batches/{batch.id}#children$"))

    # Retry the dead child: the dead-letter preview first, then back to the batch.
    page.get_by_role("link", name="Retry all dead children…").click()
    page.wait_for_url(re.compile(r".*/dead/bulk\?.*batch=.*"))
    assert page.locator("h1").inner_text() == "Retry 1 dead job?"
    problems += checked(page, "batch-retry-preview")
    page.get_by_role("button", name="Retry 1 job").click()
    page.wait_for_url(f"{base}/batches/{batch.id}")
    assert "Requeued 1 job." in flash(page, "Requeued 1 job.")
    summary = page.locator("#batch-summary").inner_text()
    assert "2 of 6 children succeeded, 0 dead or cancelled, 4 to go" in summary

    # Cancel the batch with a reason.
    actions = page.locator("#batch-actions")
    actions.get_by_label(f"Reason for cancelling batch #{batch.id}").fill("Wrong month exported")
    actions.get_by_role("button", name="Cancel batch").click()
    message = flash(page, f"Cancelled batch #{batch.id}")
    assert "5 jobs cancelled" in message  # four parts and on_success
    assert f"Its on_finish callback (job #{batch.on_finish}) runs once every child is final" in (
        message
    )
    summary = page.locator("#batch-summary").inner_text()
    assert "by sam" in summary
    assert "Wrong month exported" in summary
    assert page.locator("#batch-summary .badge.batch-cancelled").is_visible()
    assert page.locator("#batch-actions").count() == 0
    problems += checked(page, "batch-cancelled")
    assert not problems, "\n".join(problems)


def test_a_viewer_follows_a_waiting_callback_to_its_batch_and_cannot_act(
    page: Any, live_server: Server, engine: sa.Engine
) -> None:
    base, _ = live_server
    batch = seed_batch(engine)
    log_in(page, base, "vic")
    page.goto(f"{base}/jobs/{batch.on_success}")
    why = page.locator("#why-waiting")
    assert (
        f"waiting for dead job #{batch.dead} of batch #{batch.id} (retry it to go on)"
        in why.inner_text()
    )
    workflow = page.locator("#workflow").inner_text()
    assert "The on_success callback of batch" in workflow
    why.get_by_role("link").click()
    page.wait_for_url(f"{base}/batches/{batch.id}")
    assert page.locator("#batch-actions").count() == 0
    assert page.get_by_role("button", name="Cancel batch").count() == 0
    # A part waited for the extract: its page lists it, and the extract lists the parts.
    page.locator("#graph a.node", has_text=f"#{batch.parts[0]}").click()
    page.wait_for_url(f"{base}/jobs/{batch.parts[0]}")
    dependencies = page.locator("#workflow")
    assert "Runs after 1 job" in dependencies.inner_text()
    dependencies.get_by_role("link", name=f"#{batch.extract}").click()
    page.wait_for_url(f"{base}/jobs/{batch.extract}")
    assert "6 jobs run after this one" in page.locator("#workflow").inner_text()
