"""A job's page with a concurrency key: the key's limit, the jobs holding its slots, and
why a job waits for a slot ("2 of 2 slots of tenant:42 busy") — both databases."""

from __future__ import annotations

import html
import re
from typing import Any

import sqlalchemy as sa

from jobdesk import NewJob, enqueue_many
from jobdesk.worker.context import JobContext
from jobdesk.worker.registry import Registry, job
from tests.dashboard.conftest import Browser

_reg = Registry()


@job("crm.push", concurrency=2, target=_reg)
def push(payload: dict[str, Any], ctx: JobContext) -> None:
    return None


@job("crm.pull", target=_reg)
def pull(payload: dict[str, Any], ctx: JobContext) -> None:
    return None


def text_of(response: Any) -> str:
    body = response.get_data(as_text=True)
    response.close()
    return str(body)


def test_a_job_waiting_for_a_slot_says_whose_slots_are_busy(
    viewer: Browser, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        ids = enqueue_many(
            conn, [NewJob("crm.push", {"n": n}, concurrency_key="tenant:42") for n in range(3)]
        )
    page = text_of(viewer.get(f"/jobs/{ids[2]}"))
    why = re.search(r'<div class="banner banner-warn" id="why-waiting".*?</div>', page, re.S)
    assert why is not None
    assert "waiting for a slot: 2 of 2 slots of tenant:42 busy (1 waiting)" in html.unescape(
        why.group(0)
    )
    assert 'href="#concurrency"' in why.group(0)
    panel = re.search(r'<section class="panel" id="concurrency">.*?</section>', page, re.S)
    assert panel is not None
    assert "At most <strong>2</strong> jobs of this key" in panel.group(0)
    holders = re.findall(r'href="/jobs/(\d+)">#\d+</a>', panel.group(0))
    assert holders == [str(ids[0]), str(ids[1])]
    # A holder's page has the panel and no why-waiting line.
    holder = text_of(viewer.get(f"/jobs/{ids[0]}"))
    assert 'id="concurrency"' in holder
    assert 'id="why-waiting"' not in holder


def test_a_key_without_a_limit_shows_its_place_in_line(viewer: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        (only,) = enqueue_many(conn, [NewJob("crm.pull", {}, concurrency_key="tenant:7")])
    page = html.unescape(text_of(viewer.get(f"/jobs/{only}")))
    assert "No limit on how many run. At most 100 wait in line at a time" in page
    assert "1 of 100 places in line of tenant:7 taken (0 waiting for a turn)" in page


def test_a_secret_looking_key_is_masked_on_the_page(viewer: Browser, engine: sa.Engine) -> None:
    key = "token=sk_live_abcdefghijklmnop1234"
    with engine.begin() as conn:
        (only,) = enqueue_many(conn, [NewJob("crm.pull", {}, concurrency_key=key)])
    page = text_of(viewer.get(f"/jobs/{only}"))
    assert "sk_live_abcdefghijklmnop1234" not in page
