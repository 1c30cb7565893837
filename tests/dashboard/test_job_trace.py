"""A job enqueued inside a trace shows its trace id on its page, linked through
`JOBDESK_TRACE_URL_TEMPLATE` when that is set; a template that is no http(s) URL with
`{trace_id}` is refused at start."""

from __future__ import annotations

from dataclasses import replace

import pytest
import sqlalchemy as sa

from jobdesk import enqueue
from jobdesk.shared.settings import Settings, SettingsError
from jobdesk.shared.tracing.store import keep_traces
from tests.dashboard.conftest import Browser

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"

pytestmark = pytest.mark.one_database


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return replace(settings, trace_url_template="https://tempo.example/trace/{trace_id}")


def test_the_job_page_links_its_trace(viewer: Browser, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        traced = enqueue(conn, "crm.sync", {})
        plain = enqueue(conn, "crm.sync", {})
        keep_traces(conn, [(traced, PARENT, None)])
    html = viewer.get(f"/jobs/{traced}").get_data(as_text=True)
    assert f'<a href="https://tempo.example/trace/{TRACE_ID}"' in html
    assert "<dt>Trace</dt>" not in viewer.get(f"/jobs/{plain}").get_data(as_text=True)


def test_a_template_without_the_placeholder_is_refused() -> None:
    for bad in ("https://tempo.example/trace/", "javascript:alert(1)//{trace_id}"):
        with pytest.raises(SettingsError, match="JOBDESK_TRACE_URL_TEMPLATE: an http"):
            Settings.from_env({"JOBDESK_TRACE_URL_TEMPLATE": bad})
