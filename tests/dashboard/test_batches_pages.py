"""The Batches pages: the list (progress, state, callbacks, keyset pages), a batch's page
(counts, children by status, the `after=` graph, retry all dead children through the
bulk preview, cancel with a reason), a job's place in its workflow and why a `waiting`
job waits — and `waiting` shown like every other status."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk import NewJob, enqueue, enqueue_batch
from jobdesk.dashboard.graphs import layout
from jobdesk.dashboard.views import batches as batches_view
from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.core.models import jobs, workers
from jobdesk.shared.workflows.models import batches
from jobdesk.worker.context import JobContext
from jobdesk.worker.registry import Registry, job
from jobdesk.worker.testing import drain
from tests.dashboard.conftest import Browser


@pytest.fixture
def reg(engine: sa.Engine) -> Registry:
    """`report.part` fails when its payload says so (dead at once: one attempt);
    `report.merge` is the callbacks'. A worker row runs both (a retry needs one)."""
    reg = Registry()

    @job("report.part", target=reg, max_attempts=1)
    def part(payload: dict[str, Any], ctx: JobContext) -> Any:
        if payload.get("fail"):
            raise RuntimeError(f"part {payload['n']} failed: upstream 502")
        return {"n": payload["n"]}

    @job("report.merge", target=reg, max_attempts=1)
    def merge(payload: dict[str, Any], ctx: JobContext) -> None:
        return None

    with engine.begin() as conn:
        conn.execute(
            sa.insert(workers).values(
                id="w-1", host="test", pid=1, queues=None, concurrency=1, version="test",
                job_types={name: {} for name in reg.names()},
            )
        )  # fmt: skip
    return reg


def parts(n: int, fail: frozenset[int] = frozenset(), **extra: Any) -> list[NewJob]:
    return [NewJob("report.part", {"n": i, "fail": i in fail}, **extra) for i in range(n)]


def merge(kind: str) -> NewJob:
    return NewJob("report.merge", {"kind": kind})


def text_of(response: Any) -> str:
    return str(response.get_data(as_text=True))


def section(page: str, marker: str, end: str = "</section>") -> str:
    return page.split(marker, 1)[1].split(end, 1)[0]


# --- the list --------------------------------------------------------------------------


def test_the_list_shows_progress_state_and_callbacks_newest_first(
    viewer: Browser, engine: sa.Engine, reg: Registry
) -> None:
    with engine.begin() as conn:
        done = enqueue_batch(
            conn,
            parts(3, fail=frozenset({1})),
            on_success=merge("success"),
            on_finish=merge("finish"),
            name="invoices 2030-06",
        )
    drain(engine, registry=reg)
    with engine.begin() as conn:
        running = enqueue_batch(conn, parts(2))
    page = text_of(viewer.get("/batches"))
    assert 'aria-current="page">Batches</a>' in page
    assert page.index(f'id="batch-{running.id}"') < page.index(f'id="batch-{done.id}"')
    row = section(page, f'id="batch-{done.id}"', "</tr>")
    assert "invoices 2030-06" in row
    assert "2 of 3 children succeeded, 1 dead or cancelled, 0 to go" in row
    assert 'class="badge batch-finished">finished</span>' in row
    assert f'href="/batches/{done.id}"' in row
    # on_finish ran; on_success waits for the dead part, with their states
    assert f'on_success: <a href="/jobs/{done.on_success_job_id}">' in row
    assert re.search(rf'on_finish: <a href="/jobs/{done.on_finish_job_id}">[^<]*</a> <span '
                     r'class="badge status-succeeded"', row)  # fmt: skip
    assert 'class="badge status-waiting">waiting</span>' in row
    other = section(page, f'id="batch-{running.id}"', "</tr>")
    assert "0 of 2 children succeeded, 0 dead or cancelled, 2 to go" in other
    assert ">running</span>" in other
    assert "unnamed" in other
    assert ">none</span>" in other  # no callbacks
    # the table refreshes itself at the chosen interval
    assert 'hx-trigger="every 5s, jobdesk:visible"' in page


def test_the_list_pages_back_by_id(
    viewer: Browser, engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(batches_view, "PAGE", 2)
    with engine.begin() as conn:
        ids = [enqueue_batch(conn, parts(1), name=f"run {n}").id for n in range(3)]
    first = text_of(viewer.get("/batches"))
    assert [f"batch-{ids[2]}", f"batch-{ids[1]}"] == re.findall(r'id="(batch-\d+)"', first)
    assert f'href="/batches?before={ids[1]}">Older →</a>' in first
    assert "Newest</a>" not in first
    older = text_of(viewer.get(f"/batches?before={ids[1]}"))
    assert re.findall(r'id="(batch-\d+)"', older) == [f"batch-{ids[0]}"]
    assert "Older →" not in older
    assert 'href="/batches">⇤ Newest</a>' in older
    assert "No older batch" in text_of(viewer.get(f"/batches?before={ids[0]}"))
    assert viewer.get("/batches?before=x").status_code == 400


def test_no_batch_yet(viewer: Browser) -> None:
    assert "No batch yet" in text_of(viewer.get("/batches"))


# --- a batch's page --------------------------------------------------------------------


def test_a_batch_page_counts_its_children_and_filters_them_by_status(
    viewer: Browser, engine: sa.Engine, reg: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    with engine.begin() as conn:
        batch = enqueue_batch(conn, parts(5, fail=frozenset({1, 3})), name="nightly parts")
    drain(engine, registry=reg, max_jobs=4)
    response = viewer.get(f"/batches/{batch.id}")
    assert response.status_code == 200
    page = text_of(response)
    assert f"Batch #{batch.id} · " in page
    summary = section(page, 'id="batch-summary"')
    assert "2 of 5 children succeeded, 2 dead or cancelled, 1 to go" in summary
    tiles = re.findall(r'status=(\w+)#children">\s*<div class="label">(\w+)</div>\s*'
                       r'<div class="value">(\d+)</div>', summary)  # fmt: skip
    assert tiles == [("queued", "Queued", "1"), ("succeeded", "Succeeded", "2"),
                     ("dead", "Dead", "2")]  # fmt: skip
    children = section(page, 'id="children"')
    assert len(re.findall(r'<tr id="child-', children)) == 5
    dead = text_of(viewer.get(f"/batches/{batch.id}?status=dead"))
    rows = re.findall(r'<tr id="child-(\d+)"', section(dead, 'id="children"'))
    assert rows == [str(batch.job_ids[1]), str(batch.job_ids[3])]
    assert "part 1 failed: upstream 502" in dead
    assert 'aria-current="page">dead 2</a>' in dead
    assert viewer.get(f"/batches/{batch.id}?status=lost").status_code == 400
    # keyset pages of children
    monkeypatch.setattr(batches_view, "CHILDREN_PAGE", 2)
    first = section(text_of(viewer.get(f"/batches/{batch.id}")), 'id="children"')
    assert re.findall(r'<tr id="child-(\d+)"', first) == [str(i) for i in batch.job_ids[:2]]
    assert f'after={batch.job_ids[1]}#children">Next page →' in first
    last = text_of(viewer.get(f"/batches/{batch.id}?after={batch.job_ids[3]}"))
    assert re.findall(r'<tr id="child-(\d+)"', last) == [str(batch.job_ids[4])]
    assert "First page</a>" in last
    assert "the last one" in last


def test_the_summary_refreshes_alone_and_stops_once_every_child_is_final(
    viewer: Browser, engine: sa.Engine, reg: Registry
) -> None:
    with engine.begin() as conn:
        batch = enqueue_batch(conn, parts(2))
    page = text_of(viewer.get(f"/batches/{batch.id}"))
    poller = re.search(r'<div id="batch-summary" data-poll hx-get="([^"]+)"', page)
    assert poller is not None
    htmx = {"HX-Request": "true", "HX-Target": "batch-summary"}
    partial = viewer.get(html.unescape(poller.group(1)), headers=htmx)
    assert partial.status_code == 200
    assert "0 of 2 children succeeded" in text_of(partial)
    assert 'id="children"' not in text_of(partial)
    drain(engine, registry=reg)
    final = viewer.get(html.unescape(poller.group(1)), headers=htmx)
    assert final.status_code == 286  # htmx stops polling
    assert "2 of 2 children succeeded" in text_of(final)
    assert '<div id="batch-summary" >' in text_of(viewer.get(f"/batches/{batch.id}"))


def test_the_graph_draws_the_after_chains_among_the_children(
    viewer: Browser, engine: sa.Engine, reg: Registry
) -> None:
    with engine.begin() as conn:
        plain = enqueue_batch(conn, parts(2))
        extract = enqueue(conn, "report.part", {"n": 100})
        batch = enqueue_batch(conn, parts(3, after=[extract]))
    page = text_of(viewer.get(f"/batches/{plain.id}"))
    assert "there is no dependency to draw" in page
    assert "<svg" not in section(page, 'id="graph"')
    graph = section(text_of(viewer.get(f"/batches/{batch.id}")), 'id="graph"')
    assert graph.count('class="edge"') == 3
    assert graph.count('marker-end="url(#graph-arrow)"') == 3
    nodes = re.findall(r'<a class="node status-(\w+)" href="/jobs/(\d+)">', graph)
    assert nodes == [("queued", str(extract))] + [("waiting", str(i)) for i in batch.job_ids]
    assert f"#{extract} · queued" in graph
    assert "Dependency graph: 4 jobs, 3 arrows" in graph
    assert (
        f'<a href="/jobs/{batch.job_ids[0]}">#{batch.job_ids[0]}</a> (waiting) runs after '
        f'<a href="/jobs/{extract}">#{extract}</a> (queued)' in graph
    )
    assert "Capped" not in graph
    # the dependency in the first column, its dependents together in the next one
    columns = [float(x) for x in re.findall(r'<rect x="([\d.]+)"', graph)]
    assert columns[0] < columns[1] == columns[2] == columns[3]


def test_a_graph_over_the_limit_is_capped_and_says_so(
    viewer: Browser, engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(batches_view, "GRAPH_LIMIT", 3)
    with engine.begin() as conn:
        extract = enqueue(conn, "report.part", {"n": 100})
        batch = enqueue_batch(conn, parts(4, after=[extract]))
    graph = section(text_of(viewer.get(f"/batches/{batch.id}")), 'id="graph"')
    assert "Capped at 3 jobs" in graph
    assert graph.count('class="edge"') == 2
    assert len(re.findall(r'<a class="node ', graph)) == 3


def test_an_unknown_batch_is_a_404_page(viewer: Browser, operator: Browser) -> None:
    response = viewer.get("/batches/999")
    assert response.status_code == 404
    assert "batch #999 does not exist" in text_of(response)
    assert "<html" in text_of(response)
    assert viewer.get("/batches/0").status_code == 400
    assert viewer.get("/batches/abc").status_code == 404
    assert operator.post("/batches/999/cancel", {"reason": "x"}).status_code == 404


def test_a_batch_name_is_shown_as_text(viewer: Browser, engine: sa.Engine) -> None:
    name = '<script>alert("batch")</script>'
    with engine.begin() as conn:
        batch = enqueue_batch(conn, parts(1), on_success=merge("s"), name=name)
    for url in ("/batches", f"/batches/{batch.id}", f"/jobs/{batch.on_success_job_id}"):
        page = text_of(viewer.get(url))
        assert name not in page, url
        assert "&lt;script&gt;alert(&#34;batch&#34;)&lt;/script&gt;" in page, url


# --- acting on a batch -----------------------------------------------------------------


def test_a_viewer_sees_the_batch_but_cannot_act_on_it(
    viewer: Browser, engine: sa.Engine, reg: Registry
) -> None:
    with engine.begin() as conn:
        batch = enqueue_batch(conn, parts(3, fail=frozenset({0})))
    drain(engine, registry=reg, max_jobs=1)
    page = text_of(viewer.get(f"/batches/{batch.id}"))
    assert "0 of 3 children succeeded, 1 dead or cancelled, 2 to go" in page
    assert "Cancel batch" not in page
    assert "Retry all dead children" not in page
    assert 'id="batch-actions"' not in page
    refused = viewer.post(f"/batches/{batch.id}/cancel", {"reason": "wrong month"})
    assert refused.status_code == 403
    preview = viewer.get(f"/dead/bulk?action=retry&scope=all&batch={batch.id}")
    assert preview.status_code == 403
    with engine.connect() as conn:
        row = conn.execute(sa.select(batches).where(batches.c.id == batch.id)).one()
    assert row.cancelled_at is None


def test_an_operator_cancels_a_batch_with_a_reason(
    operator: Browser, engine: sa.Engine, reg: Registry
) -> None:
    with engine.begin() as conn:
        batch = enqueue_batch(
            conn, parts(3), on_success=merge("s"), on_finish=merge("f"), name="june"
        )
    drain(engine, registry=reg, max_jobs=1)
    url = f"/batches/{batch.id}"
    page = text_of(operator.get(url))
    form = section(page, 'id="batch-actions"')
    assert f'action="/batches/{batch.id}/cancel"' in form
    assert "required" in form
    assert "Retry all dead children" not in form  # none is dead
    blank = operator.post(f"{url}/cancel", {"reason": "  ", "next": url})
    assert blank.status_code == 303
    assert blank.headers["Location"].endswith(url)
    assert f"Batch #{batch.id} not cancelled: the reason is required" in text_of(operator.get(url))
    done = operator.post(f"{url}/cancel", {"reason": "wrong month", "next": url})
    assert done.status_code == 303
    page = text_of(operator.get(url))
    assert (
        f"Cancelled batch #{batch.id}: 3 jobs cancelled. Its on_finish callback "
        f"(job #{batch.on_finish_job_id}) runs once every child is final."
    ) in page
    summary = section(page, 'id="batch-summary"')
    assert ">cancelled</span>" in summary
    assert "by otto" in summary
    assert "“wrong month”" in summary
    assert 'id="batch-actions"' not in page  # nothing left to cancel
    with engine.connect() as conn:
        entries = conn.execute(
            sa.select(audit_log.c.actor, audit_log.c.reason).where(
                audit_log.c.action == "batch.cancel", audit_log.c.subject == f"batch:{batch.id}"
            )
        ).all()
    assert [tuple(e) for e in entries] == [("otto", "wrong month")]
    again = operator.post(f"{url}/cancel", {"reason": "again", "next": url})
    assert again.status_code == 303
    assert f"Nothing changed: batch #{batch.id} is already cancelled." in text_of(operator.get(url))
    listed = section(text_of(operator.get("/batches")), f'id="batch-{batch.id}"', "</tr>")
    assert "cancelled by otto" in listed
    assert "“wrong month”" in listed


def test_cancelling_needs_the_csrf_token(operator: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        batch = enqueue_batch(conn, parts(1))
    url = f"/batches/{batch.id}/cancel"
    headers = {"Origin": "http://localhost", "Sec-Fetch-Site": "same-origin"}
    missing = operator.client.post(url, data={"reason": "x"}, headers=headers)
    assert missing.status_code == 403
    forged = operator.client.post(
        url, data={"reason": "x", "csrf_token": "forged"}, headers=headers
    )
    assert forged.status_code == 403
    with engine.connect() as conn:
        assert conn.execute(sa.select(batches.c.cancelled_at)).scalar() is None


def test_retry_all_dead_children_goes_through_the_bulk_preview(
    operator: Browser, engine: sa.Engine, reg: Registry
) -> None:
    with engine.begin() as conn:
        outside = enqueue(conn, "report.part", {"n": 9, "fail": True})
        batch = enqueue_batch(
            conn, parts(4, fail=frozenset({0, 2})), on_success=merge("s"), name="june"
        )
    drain(engine, registry=reg)
    url = f"/batches/{batch.id}"
    page = text_of(operator.get(url))
    actions = section(page, 'id="batch-actions"')
    assert "2 dead children need a decision" in actions
    link = re.search(r'href="([^"]+)">Retry all dead children…', actions)
    assert link is not None
    preview_url = html.unescape(link.group(1))
    assert f"batch={batch.id}" in preview_url
    preview = text_of(operator.get(preview_url))
    assert "Retry 2 dead jobs?" in preview
    assert f'<a href="/batches/{batch.id}">batch #{batch.id}</a>' in preview
    confirm = section(preview, 'action="/dead/bulk"', "</form>")
    fields = dict(re.findall(r'name="(\w+)" value="([^"]*)"', confirm))
    assert fields["batch"] == str(batch.id)
    assert fields["scope"] == "all"
    fields.pop("csrf_token")
    fields["next"] = html.unescape(fields["next"])
    done = operator.post("/dead/bulk", {**fields, "reason": "upstream is back"})
    assert done.status_code == 303
    assert done.headers["Location"] == url
    page = text_of(operator.get(url))
    assert "Requeued 2 jobs." in page
    with engine.connect() as conn:
        retried = conn.execute(
            sa.select(jobs.c.id, jobs.c.batch_id, jobs.c.retried_from_id)
            .where(jobs.c.retried_from_id.is_not(None))
            .order_by(jobs.c.id)
        ).all()
        resolution = conn.execute(sa.select(jobs.c.resolution).where(jobs.c.id == outside)).scalar()
    assert [(r.batch_id, r.retried_from_id) for r in retried] == [
        (batch.id, batch.job_ids[0]),
        (batch.id, batch.job_ids[2]),
    ]
    assert resolution is None  # the dead job outside the batch is left alone
    assert "2 of 4 children succeeded, 0 dead or cancelled, 2 to go" in page
    assert "Retry all dead children" not in page


def test_the_jobs_list_shows_a_batchs_children(viewer: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        other = enqueue(conn, "report.part", {"n": 7})
        batch = enqueue_batch(conn, parts(2))
    page = text_of(viewer.get(f"/jobs?batch={batch.id}"))
    shown = re.findall(r'<tr id="job-(\d+)"', page)
    assert sorted(shown) == sorted(str(i) for i in batch.job_ids)
    assert str(other) not in shown
    assert f'Showing the children of <a href="/batches/{batch.id}">batch #{batch.id}</a>' in page
    assert f'name="batch" value="{batch.id}"' in page


# --- a job's page -----------------------------------------------------------------------


def test_a_callback_says_what_it_waits_for_and_links_its_batch(
    viewer: Browser, engine: sa.Engine, reg: Registry
) -> None:
    with engine.begin() as conn:
        batch = enqueue_batch(
            conn,
            parts(3, fail=frozenset({1})),
            on_success=merge("s"),
            on_finish=merge("f"),
            name="june",
        )
    finish = text_of(viewer.get(f"/jobs/{batch.on_finish_job_id}"))
    why = section(finish, 'id="why-waiting"', "</div>")
    assert f"waiting for 3 of 3 children of batch #{batch.id}" in why
    assert f'<a href="/batches/{batch.id}">' in why
    workflow = section(finish, 'id="workflow"')
    assert "The <strong>on_finish</strong> callback of" in workflow
    assert f'<a href="/batches/{batch.id}">batch #{batch.id}</a>' in workflow
    assert "It runs once every child is final" in workflow
    drain(engine, registry=reg)
    success = text_of(viewer.get(f"/jobs/{batch.on_success_job_id}"))
    why = section(success, 'id="why-waiting"', "</div>")
    dead = batch.job_ids[1]
    assert f"waiting for dead job #{dead} of batch #{batch.id} (retry it to go on)" in why
    assert 'class="badge status-waiting">waiting</span>' in success
    child = text_of(viewer.get(f"/jobs/{batch.job_ids[0]}"))
    assert "A child of" in section(child, 'id="workflow"')
    assert 'id="why-waiting"' not in child


def test_a_job_after_others_lists_them_and_says_which_one_holds_it(
    operator: Browser, engine: sa.Engine, reg: Registry
) -> None:
    with engine.begin() as conn:
        first = enqueue(conn, "report.part", {"n": 1, "fail": True})
        second = enqueue(conn, "report.part", {"n": 2})
        last = enqueue(conn, "report.part", {"n": 3}, after=[first, second])
    page = text_of(operator.get(f"/jobs/{last}"))
    why = section(page, 'id="why-waiting"', "</div>")
    assert "waiting for 2 of 2 jobs to succeed" in why
    assert 'href="#dependencies"' in why
    workflow = section(page, 'id="workflow"')
    assert 'id="dependencies">Runs after 2 jobs</h3>' in workflow
    assert f'<a href="/jobs/{first}">#{first}</a>' in workflow
    # a waiting job can be cancelled like a queued one
    assert "Cancel this job" in page
    drain(engine, registry=reg)
    page = text_of(operator.get(f"/jobs/{last}"))
    why = section(page, 'id="why-waiting"', "</div>")
    assert f"waiting for dead job #{first}" in why
    assert f'<a href="/jobs/{first}">' in why
    assert 'class="badge status-dead">dead</span>' in section(page, 'id="workflow"')
    upstream = section(text_of(operator.get(f"/jobs/{first}")), 'id="workflow"')
    assert "1 job runs after this one" in upstream
    assert f'<a href="/jobs/{last}">#{last}</a>' in upstream


# --- `waiting` everywhere ----------------------------------------------------------------


def test_waiting_is_a_status_like_the_others(viewer: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        first = enqueue(conn, "report.part", {"n": 1}, queue="reports")
        after = enqueue(conn, "report.part", {"n": 2}, queue="reports", after=[first])
    overview = text_of(viewer.get("/"))
    tiles = re.findall(r'<div class="label">(\w+) jobs</div>', overview)
    assert tiles[:2] == ["Waiting", "Queued"]
    assert "waiting" in re.findall(r'<option value="(\w+)"', text_of(viewer.get("/jobs")))
    listed = text_of(viewer.get("/jobs?status=waiting"))
    assert re.findall(r'<tr id="job-(\d+)"', listed) == [str(after)]
    assert f'<span class="badge status-waiting" id="job-{after}-status">waiting</span>' in listed
    queues = text_of(viewer.get("/queues"))
    assert re.findall(r'<th scope="col" class="num">(\w+)</th>', queues)[:2] == [
        "waiting",
        "queued",
    ]
    assert 'data-label="Jobs waiting"><a href="/jobs?queue=reports&amp;status=waiting">1</a>' in (
        queues
    )
    css = viewer.get("/static/dashboard.css")
    assert ".status-waiting {" in text_of(css)
    css.close()


# --- the graph's layout ----------------------------------------------------------------


def graph_of(edges: list[tuple[int, int]], *, limit: int = 200) -> Any:
    ids = sorted({job_id for edge in edges for job_id in edge})
    nodes = [{"id": i, "job_type": "report.part", "status": "queued"} for i in ids]
    return layout({"nodes": nodes, "edges": edges}, limit=limit)


def test_the_layout_puts_each_job_right_of_its_deepest_dependency() -> None:
    # 1 -> 2 -> 4 and 1 -> 3 -> 4, and 5 -> 4 (5 waits for nothing drawn)
    graph = graph_of([(1, 2), (1, 3), (2, 4), (3, 4), (5, 4)])
    x = {node.id: node.x for node in graph.nodes}
    assert x[1] == x[5] < x[2] == x[3] < x[4]
    assert len(graph.edges) == 5
    assert all(edge.path.startswith("M") for edge in graph.edges)
    assert graph.width > 0
    assert graph.height > 0
    assert [(d.node.id, [n.id for n in d.dependencies]) for d in graph.dependents()] == [
        (2, [1]), (3, [1]), (4, [2, 3, 5]),
    ]  # fmt: skip
    # a retry that took a dependency's place has a higher id than its dependent
    retried = graph_of([(9, 4)])
    assert retried.nodes[1].id == 9
    assert retried.nodes[1].x < retried.nodes[0].x


def test_the_layout_keeps_every_dependency_of_a_drawn_job_within_the_limit() -> None:
    graph = graph_of([(1, 10), (2, 10), (1, 11), (3, 12), (4, 12)], limit=5)
    assert sorted(node.id for node in graph.nodes) == [1, 2, 10, 11]
    assert graph.capped
    assert not graph_of([(1, 10)], limit=2).capped
    empty = layout({"nodes": [], "edges": []}, limit=5)
    assert (empty.nodes, empty.edges, empty.width, empty.capped) == ([], [], 0, False)
