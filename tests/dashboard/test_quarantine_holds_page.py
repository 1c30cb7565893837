"""The Holds page (quarantine holds): viewers read what is held, by whom and why;
operators preview a hold, confirm it, and release it — each audited, bad input named next
to its field with nothing written; the jobs list filters to one hold's jobs, a held job's
page says who holds it, and the overview counts them."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa

from jobdesk import enqueue
from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.models import jobs
from jobdesk.shared.flow.holds import HoldTarget, place_hold
from jobdesk.shared.flow.models import holds
from tests.dashboard.conftest import Browser

REASON = "runaway import, ticket 4711"


def text_of(response: Any) -> str:
    body = response.get_data(as_text=True)
    response.close()
    return html.unescape(str(body))


def keyed(engine: sa.Engine, count: int, key: str = "tenant:42", **options: Any) -> list[int]:
    with engine.begin() as conn:
        return [
            enqueue(conn, "tenant.import", {"n": n}, concurrency_key=key, **options)
            for n in range(count)
        ]


def hold_on(
    engine: sa.Engine, value: str = "tenant:42", *, actor: str = "ana", **options: Any
) -> int:
    with engine.begin() as conn:
        return place_hold(
            conn,
            HoldTarget.parse(options.pop("match", "concurrency_key"), value),
            reason=options.pop("reason", REASON),
            actor=actor,
            now=db_now(conn),
            **options,
        ).id


def states(engine: sa.Engine, ids: list[int]) -> list[tuple[str, int | None]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(jobs.c.id, jobs.c.status, jobs.c.held_by)).all()
    found = {row.id: (row.status, row.held_by) for row in rows}
    return [found[i] for i in ids]


def hold_rows(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(holds)).scalar_one())


def row(page: str, hold_id: int) -> str:
    return page.split(f'id="hold-{hold_id}">')[1].split("</tr>", maxsplit=1)[0]


def words(markup: str) -> str:
    """The text a person reads: tags left out, white space collapsed."""
    return " ".join(re.sub(r"<[^>]+>", " ", markup).split())


def test_viewers_see_the_holds_but_cannot_act(viewer: Browser, engine: sa.Engine) -> None:
    keyed(engine, 2)
    hold_id = hold_on(engine, until=datetime.now(UTC) + timedelta(hours=3))
    page = text_of(viewer.get("/holds"))
    assert '<a href="/holds"' in page  # in the navigation
    line = row(page, hold_id)
    said = words(line)
    assert "tenant:42 hold #1" in said
    assert f"“{REASON}”" in said
    assert "by ana" in said
    assert re.search(r"\(in (2 h 59 min|3 h 0 min)\)", said)
    assert f'href="/jobs?held_by={hold_id}">2</a>' in line
    assert "Release" not in line
    assert 'id="place"' not in page
    assert viewer.post(f"/holds/{hold_id}/release", {}).status_code == 403
    assert viewer.post("/holds", {"value": "tenant:7", "reason": "x"}).status_code == 403
    assert viewer.get("/holds/preview?value=tenant:7&reason=x").status_code == 403
    assert hold_rows(engine) == 1


def test_an_operator_previews_a_hold_then_confirms_it(operator: Browser, engine: sa.Engine) -> None:
    ids = keyed(engine, 3)
    other = keyed(engine, 1, "tenant:7")
    preview = operator.get(
        "/holds/preview?match=concurrency_key&value=tenant:42&reason=" + REASON.replace(" ", "+")
    )
    page = text_of(preview)
    assert preview.status_code == 200
    count = re.search(r'<p id="hold-count">(.*?)</p>', page, re.S)
    assert count is not None
    assert re.sub(r"<[^>]+>", "", count.group(1)) == (
        "This holds 3 jobs now (and every new matching job until released)."
    )
    assert re.findall(r'href="/jobs/(\d+)">#\d+</a>', page) == [str(i) for i in ids]
    assert "Confirm the hold" in page
    assert hold_rows(engine) == 0  # a preview changes nothing

    done = operator.post(
        "/holds", {"match": "concurrency_key", "value": "tenant:42", "reason": REASON}
    )
    assert done.status_code == 303
    assert done.headers["Location"] == "/holds#hold-1"
    after = text_of(operator.get("/holds"))
    assert (
        "Placed hold #1 on tenant:42: 3 jobs held now, and every new matching job until it "
        "is released." in after
    )
    assert 'href="/jobs?held_by=1">Show the held jobs</a>' in after
    assert "by otto" in words(row(after, 1))
    assert states(engine, [*ids, *other]) == [("waiting", 1)] * 3 + [("queued", None)]
    with engine.connect() as conn:
        entries = conn.execute(
            sa.select(
                audit_log.c.action, audit_log.c.actor, audit_log.c.subject, audit_log.c.reason
            ).where(audit_log.c.action.like("hold.%"))
        ).all()
    assert [tuple(entry) for entry in entries] == [("hold.add", "otto", "tenant:42", REASON)]

    listed = text_of(operator.get("/jobs?held_by=1"))
    assert listed.count('<tr id="job-') == 3
    assert "Showing the jobs hold #1 holds now." in words(listed)
    line = listed.split(f'id="job-{ids[0]}"')[1].split("</tr>")[0]
    assert f"held: quarantine of tenant:42 by otto — {REASON}" in line
    assert 'href="/holds#hold-1"' in line

    job_page = text_of(operator.get(f"/jobs/{ids[0]}"))
    why = job_page.split('id="why-waiting"')[1].split("</div>")[0]
    assert f"held: quarantine of tenant:42 by otto — {REASON}" in why
    assert 'href="/holds#hold-1"' in why


def test_a_job_page_offers_to_quarantine_its_key(
    operator: Browser, viewer: Browser, engine: sa.Engine
) -> None:
    (job_id,) = keyed(engine, 1)
    page = text_of(operator.get(f"/jobs/{job_id}"))
    link = 'href="/holds?match=concurrency_key&amp;value=tenant:42#place"'
    assert link in operator.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "Quarantine tenant:42…" in re.sub(r"<[^>]+>", "", page)
    form = text_of(operator.get("/holds?match=concurrency_key&value=tenant:42"))
    assert 'name="value" value="tenant:42"' in form
    assert "Quarantine" not in text_of(viewer.get(f"/jobs/{job_id}"))


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"match": "tenant"}, "match", "'tenant' is not one of concurrency_key, group_key"),
        ({"value": "  "}, "value", "says what to hold"),
        ({"match": "payload", "value": "a=1 b=2"}, "value", "a payload hold is one term"),
        ({"match": "payload", "value": "account_id"}, "value", "account_id"),
        ({"reason": " "}, "reason", "is required"),
        ({"reason": "stop\x00now"}, "reason", "must not contain NUL"),
        ({"reason": "x" * 501}, "reason", "a hold keeps 500"),
        ({"hours": "0"}, "hours", "must be between 1 and 2160"),
        ({"hours": "soon"}, "hours", "'soon' is not a positive whole number"),
        ({"hours": "2161"}, "hours", "must be between 1 and 2160"),
        ({"until": "tomorrow"}, "until", "'tomorrow' is not a date and time"),
        ({"until": "2001-01-01T09:00"}, "until", "is already past"),
        ({"until": "2999-01-01T09:00"}, "until", "more than 90 days away"),
        ({"until": "2999-01-01T09:00", "hours": "2"}, "until", "not both"),
    ],
)
def test_bad_input_is_named_next_to_its_field_and_nothing_is_held(
    operator: Browser, engine: sa.Engine, fields: dict[str, str], field: str, message: str
) -> None:
    ids = keyed(engine, 1)
    form = {"match": "concurrency_key", "value": "tenant:42", "reason": REASON, **fields}
    for response in (
        operator.get("/holds/preview", query_string=form),
        operator.post("/holds", form),
    ):
        assert response.status_code == 422
        page = text_of(response)
        error = re.search(
            rf'<p class="field-error" id="hold-{field}-error" role="alert">(.*?)</p>', page
        )
        assert error is not None, page
        assert message in error.group(1)
        assert "Nothing was held" in page
    assert hold_rows(engine) == 0
    assert states(engine, ids) == [("queued", None)]


def test_an_end_time_is_read_on_the_viewers_clock(operator: Browser, engine: sa.Engine) -> None:
    tokyo = ZoneInfo("Asia/Tokyo")
    operator.client.set_cookie("jobdesk_tz", "Asia/Tokyo")
    end = (datetime.now(UTC) + timedelta(days=2)).astimezone(tokyo).replace(second=0, microsecond=0)
    form = {"value": "tenant:42", "reason": REASON, "until": f"{end:%Y-%m-%dT%H:%M}"}
    page = text_of(operator.get("/holds/preview", query_string=form))
    assert "or until (Asia/Tokyo)" in text_of(operator.get("/holds"))
    assert f"{end:%Y-%m-%d %H:%M} JST" in page
    assert operator.post("/holds", form).status_code == 303
    with engine.connect() as conn:
        stored = conn.execute(sa.select(holds.c.until)).scalar_one()
    assert stored == end.astimezone(UTC)
    # the hour the clocks skip in spring does not exist on a Berlin wall clock
    operator.client.set_cookie("jobdesk_tz", "Europe/Berlin")
    gap = {**form, "until": "2027-03-28T02:30"}
    refused = text_of(operator.get("/holds/preview", query_string=gap))
    assert "2027-03-28 02:30 does not exist in Europe/Berlin: the clocks skip it" in refused
    # the first minute of the calendar in Tokyo has no UTC form: named, never a 500
    operator.client.set_cookie("jobdesk_tz", "Asia/Tokyo")
    first = operator.get("/holds/preview", query_string={**form, "until": "0001-01-01T00:00"})
    assert first.status_code == 422
    assert "'0001-01-01T00:00' is out of range" in text_of(first)


def test_for_hours_ends_the_hold_that_long_after_the_confirmation(
    operator: Browser, engine: sa.Engine
) -> None:
    keyed(engine, 1)
    form = {"value": "tenant:42", "reason": REASON, "hours": "4"}
    assert "4 hours after you confirm" in text_of(operator.get("/holds/preview", query_string=form))
    before = datetime.now(UTC)
    assert operator.post("/holds", form).status_code == 303
    with engine.connect() as conn:
        stored = conn.execute(sa.select(holds.c.until)).scalar_one()
    assert before + timedelta(hours=4) - timedelta(seconds=5) < stored
    assert stored < datetime.now(UTC) + timedelta(hours=4, seconds=5)


def test_release_puts_the_jobs_back_in_line_and_is_audited(
    operator: Browser, engine: sa.Engine
) -> None:
    ids = keyed(engine, 2)
    hold_id = hold_on(engine)
    done = operator.post(
        f"/holds/{hold_id}/release", {"reason": "import fixed", "next": "/holds?x=1"}
    )
    assert done.status_code == 303
    assert done.headers["Location"] == "/holds?x=1"
    page = text_of(operator.get("/holds"))
    assert f"Released hold #{hold_id}: 2 jobs back in line." in page
    released = words(row(page.split('id="released-holds"')[1], hold_id))
    assert released.startswith(f"tenant:42 hold #{hold_id} “{REASON}” by ana ")
    assert "by otto" in released
    assert "No hold is active" in page
    assert states(engine, ids) == [("queued", None)] * 2
    audit = text_of(operator.get("/audit?action=hold.release"))
    for said in ("hold.release", "import fixed", "tenant:42", "otto"):
        assert said in audit
    assert "hold.add" in text_of(operator.get("/audit?action=hold.add"))

    again = operator.post(f"/holds/{hold_id}/release", {})
    assert again.status_code == 303
    assert f"Hold #{hold_id} not released: the hold #{hold_id} is not an active hold." in (
        text_of(operator.get("/holds"))
    )
    with engine.connect() as conn:
        releases = conn.execute(
            sa.select(sa.func.count()).where(audit_log.c.action == "hold.release")
        ).scalar_one()
    assert releases == 1


def test_what_jobs_and_operators_wrote_is_shown_escaped(
    operator: Browser, engine: sa.Engine
) -> None:
    evil = "<img src=x onerror=alert(1)>"
    keyed(engine, 1, evil)
    hold_on(engine, evil, reason="<script>alert(2)</script>")
    for url in ("/holds", "/", "/jobs?held_by=1"):
        raw = operator.get(url).get_data(as_text=True)
        assert "<img src=x" not in raw, url
        assert "<script>alert" not in raw, url
    preview = operator.get(
        "/holds/preview", query_string={"value": evil, "reason": "<script>alert(3)</script>"}
    ).get_data(as_text=True)
    assert "<img src=x" not in preview
    assert "<script>alert" not in preview
    assert "&lt;img src=x onerror=alert(1)&gt;" in preview


def test_a_bad_held_by_filter_is_a_400_naming_it(viewer: Browser) -> None:
    page = viewer.get("/jobs?held_by=tenant")
    assert page.status_code == 400
    assert "Bad filter: held_by" in page.get_data(as_text=True)


def test_the_overview_counts_the_jobs_each_quarantine_holds(
    viewer: Browser, engine: sa.Engine
) -> None:
    keyed(engine, 3)
    hold_id = hold_on(engine)
    page = text_of(viewer.get("/"))
    line = page.split('id="held-jobs"')[1].split("</div>")[0]
    assert "3 jobs held:" in line
    assert f'<a href="/jobs?held_by={hold_id}">3 by quarantine of tenant:42</a>' in line
    assert '<a href="/holds">Quarantine holds →</a>' in line
    assert "No job is due: 3 held by quarantine (see above)." in page
    assert "every queue is drained" not in page


def test_a_post_without_the_csrf_token_holds_nothing(operator: Browser, engine: sa.Engine) -> None:
    keyed(engine, 1)
    form = {"match": "concurrency_key", "value": "tenant:42", "reason": REASON}
    headers = {"Origin": "http://localhost", "Sec-Fetch-Site": "same-origin"}
    refused = operator.client.post("/holds", data=form, headers=headers)
    assert refused.status_code == 403
    hold_id = hold_on(engine)
    refused = operator.client.post(f"/holds/{hold_id}/release", data={}, headers=headers)
    assert refused.status_code == 403
    assert hold_rows(engine) == 1
    with engine.connect() as conn:
        active = conn.execute(sa.select(holds.c.released_at)).scalar_one()
    assert active is None
