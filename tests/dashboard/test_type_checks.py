"""The fix form applies an app type's `@job(validate=…)`, imported from
JOBDESK_JOB_MODULES, and shows each problem next to its field (R20)."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
import sqlalchemy as sa

from jobdesk.dashboard import create_app
from jobdesk.shared.core.models import jobs
from jobdesk.shared.settings import Settings
from tests.dashboard.conftest import browser_for, dead_job

# Roles, headers, forms and rendering: the same on either database.
pytestmark = pytest.mark.one_database


def test_the_fix_form_shows_the_app_types_own_rules_inline(
    settings: Settings, engine: sa.Engine, users: None
) -> None:
    app = create_app(replace(settings, job_modules=("tests.dashboard.jobmods.tickets",)))
    app.config["TESTING"] = True
    try:
        with engine.begin() as conn:
            job_id = dead_job(
                conn, job_type="t.ticket", queue="default", payload={"priority": "urgent"}
            )
        operator = browser_for(app, "otto")
        refused = operator.post(f"/jobs/{job_id}/fix", {"payload": '{"priority": "urgent!"}'})
        text = refused.get_data(as_text=True)
        assert refused.status_code == 422
        assert "<code>payload.priority</code> must be low or high" in text
        assert "urgent!" in text  # the operator's text is kept for the next try
        done = operator.post(
            f"/jobs/{job_id}/fix", {"payload": '{"priority": "high"}', "reason": "typo"}
        )
        assert done.status_code == 303
        with engine.connect() as conn:
            new = conn.execute(sa.select(jobs).where(jobs.c.retried_from_id == job_id)).one()
        assert new.payload == {"priority": "high"}
    finally:
        app.extensions["jobdesk"].dispose()


def test_a_job_module_that_does_not_import_leaves_the_dashboard_up_and_says_so(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="jobdesk.dashboard"):
        app = create_app(replace(settings, job_modules=("tests.dashboard.no_such_module",)))
    try:
        assert "cannot import job module 'tests.dashboard.no_such_module'" in caplog.text
        assert "will not apply that module's payload checks" in caplog.text
        assert app.test_client().get("/healthz").status_code == 200
    finally:
        app.extensions["jobdesk"].dispose()
