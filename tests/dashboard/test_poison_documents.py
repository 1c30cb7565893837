"""B11 on the job page: any stored document renders — too deep or not JSON at all (a
plain-SQL insert) shows the problem instead of a 500, and operators can download it."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from tests.dashboard.conftest import Browser


def deep_json(levels: int) -> str:
    return '{"a":' * levels + '"token=s3cr3t-v4lue"' + "}" * levels


def plain_sql_job(engine: sa.Engine, payload_text: str) -> int:
    cast = "CAST(:payload AS jsonb)" if engine.dialect.name == "postgresql" else ":payload"
    with engine.begin() as conn:
        return int(
            conn.execute(
                sa.text(
                    f"INSERT INTO jobdesk_jobs (job_type, payload) VALUES ('app.x', {cast}) "
                    "RETURNING id"
                ),
                {"payload": payload_text},
            ).scalar_one()
        )


@pytest.mark.parametrize("levels", [500, 1000])
def test_a_deep_stored_payload_renders_its_problem(
    operator: Browser, engine: sa.Engine, levels: int
) -> None:
    job_id = plain_sql_job(engine, deep_json(levels))
    page = operator.get(f"/jobs/{job_id}")
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    assert "nested" in text
    assert f"/jobs/{job_id}/payload.json" in text
    raw = operator.get(f"/jobs/{job_id}/payload.json")
    assert raw.status_code == 200
    body = raw.get_data(as_text=True)
    assert body.count('{"a":') == levels or body.count('"a"') == levels
    assert "s3cr3t-v4lue" not in body
    assert raw.headers["Cache-Control"] == "no-store"


@pytest.mark.sqlite_only
def test_a_stored_payload_that_is_not_json_renders_its_problem(
    operator: Browser, engine: sa.Engine
) -> None:
    job_id = plain_sql_job(engine, "{not json")
    page = operator.get(f"/jobs/{job_id}")
    assert page.status_code == 200
    assert "is not valid JSON" in page.get_data(as_text=True)


def test_viewers_do_not_download_raw_documents(viewer: Browser, engine: sa.Engine) -> None:
    job_id = plain_sql_job(engine, '{"user_id": 42}')
    assert viewer.get(f"/jobs/{job_id}").status_code == 200
    assert viewer.get(f"/jobs/{job_id}/payload.json").status_code == 403
