"""Every dashboard POST that changes something has the one shape of
`jobdesk.dashboard.actions.action` (run, flash, 303), and a refusal reads the same
everywhere."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from flask import Flask

from jobdesk.dashboard.actions import refusal
from jobdesk.shared.core.errors import ConflictError, NotFoundError, ValidationError
from tests.dashboard.conftest import Browser

pytestmark = pytest.mark.one_database

#: Signing in and out start and end sessions; they change no job, queue or account.
SESSION_ROUTES = {"/login", "/logout"}


def test_every_changing_post_is_shaped_as_an_action(app: Flask) -> None:
    unshaped = []
    for rule in app.url_map.iter_rules():
        if "POST" not in (rule.methods or ()) or rule.rule in SESSION_ROUTES:
            continue
        view = app.view_functions[rule.endpoint]
        if not getattr(view, "shaped_as_action", False):
            unshaped.append(rule.rule)
    assert unshaped == []


def test_refusals_read_the_same_everywhere() -> None:
    assert (
        refusal("Queue emails not paused", ValidationError("reason", "must not be empty"))
        == "Queue emails not paused: the reason must not be empty."
    )
    assert (
        refusal("Endpoint not resumed", NotFoundError("no endpoint named crm"))
        == "Endpoint not resumed: no endpoint named crm."
    )
    assert refusal("Not retried", ConflictError("job #7 is running.")) == (
        "Not retried: job #7 is running."
    )


def test_a_refused_action_flashes_and_goes_back_with_nothing_written(
    operator: Browser, engine: sa.Engine
) -> None:
    response = operator.post(
        "/queues/emails/pause", data={"reason": "x" * 5000, "next": "/queues?x=1"}
    )
    assert response.status_code == 303
    assert response.headers["Location"].endswith("/queues?x=1")
    page = operator.get("/queues").get_data(as_text=True)
    assert "Queue emails not paused: the reason" in page
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM jobdesk_queue_pauses")).scalar() == 0
