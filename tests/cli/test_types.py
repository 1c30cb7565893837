"""`jobdesk types` shows what workers published and which worker published it last."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

import sqlalchemy as sa
from click.testing import CliRunner

from jobdesk.cli import cli
from jobdesk.shared.core.job_types import TypeDefaults
from jobdesk.shared.core.published_types import publish_defaults

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def run(db_url: str, *args: str) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBDESK_")}
    result = CliRunner().invoke(cli, ["--database-url", db_url, "types", *args], env=env)
    return result.exit_code, result.output


def test_lists_the_last_publication(engine: sa.Engine, db_url: str) -> None:
    assert run(db_url) == (
        0,
        "no job types published yet: each worker publishes its types when it starts\n",
    )
    with engine.begin() as conn:
        publish_defaults(
            conn, {"crm.sync": TypeDefaults("crm", 5, 3, None)}, worker_id="w-old", now=NOW
        )
        publish_defaults(
            conn,
            {"crm.sync": TypeDefaults("webhooks", 4, 8, 10.0)},
            worker_id="host:7:ab12",
            now=NOW,
        )
    code, out = run(db_url)
    assert code == 0
    assert out.startswith(
        "crm.sync  queue webhooks, priority 4, 8 attempts, timeout 10s  "
        "(published by host:7:ab12 at 2026-12-01T09:00:00"
    )
    code, out = run(db_url, "--json")
    [row] = json.loads(out)
    assert row | {"published_at": None} == {
        "job_type": "crm.sync",
        "queue": "webhooks",
        "priority": 4,
        "max_attempts": 8,
        "timeout_seconds": 10.0,
        "published_by": "host:7:ab12",
        "published_at": None,
    }
