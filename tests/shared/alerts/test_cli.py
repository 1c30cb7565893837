"""`jobdesk check`, `jobdesk alerts list|rules` and the alert lines of `jobdesk stats`."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from jobdesk.cli import cli
from jobdesk.cli.core import _print_stats as print_stats
from jobdesk.shared.alerts.models import alerts
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.operator.queries.stats import summarize
from tests.factories import make_job
from tests.shared.alerts.helpers import dead_jobs


@pytest.fixture
def run(db_url: str, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("JOBDESK_DATABASE_URL", db_url)
    runner = CliRunner()

    def invoke(*args: str) -> tuple[int, str]:
        result = runner.invoke(cli, list(args), catch_exceptions=False)
        return result.exit_code, result.output

    return invoke


def test_check_is_zero_without_alerts_and_one_with(run, engine: sa.Engine) -> None:  # type: ignore[no-untyped-def]
    assert run("check") == (0, "ok: no open alerts\n")
    with engine.begin() as conn:
        conn.execute(
            sa.insert(alerts).values(
                rule="queue_stalled", subject="email", message="queue email: waiting 11m"
            )
        )
        conn.execute(
            sa.insert(alerts).values(
                rule="breaker_open", subject="webhook:crm", message="old", status="resolved"
            )
        )
    code, output = run("check")
    assert code == 1
    assert output.splitlines()[0] == "1 open alert:"
    assert "[open] queue_stalled email since" in output
    assert "queue email: waiting 11m" in output
    code, output = run("check", "--json")
    assert code == 1
    data = json.loads(output)
    assert data["ok"] is False
    assert [a["subject"] for a in data["open_alerts"]] == ["email"]

    code, output = run("alerts", "list", "--status", "all")
    assert code == 0
    assert len(output.splitlines()) == 2
    code, output = run("alerts", "list", "--status", "resolved", "--json")
    assert [a["rule"] for a in json.loads(output)] == ["breaker_open"]


def test_check_evaluate_runs_the_rules(run, engine: sa.Engine) -> None:  # type: ignore[no-untyped-def]
    with engine.begin() as conn:
        now = db_now(conn)
        dead_jobs(conn, 5, endpoint="crm", finished=now - timedelta(minutes=1))
    assert run("check")[0] == 0
    code, output = run("check", "--evaluate")
    assert code == 1
    assert "dead_letter_spike webhook.deliver:crm" in output


def test_stats_show_dead_letters_and_open_alerts(
    engine: sa.Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    with engine.begin() as conn:
        now = db_now(conn)
        dead_jobs(conn, 2, endpoint="crm", finished=now - timedelta(hours=1))
        dead_jobs(conn, 1, endpoint="crm", finished=now - timedelta(days=3))
        make_job(conn)
        conn.execute(sa.insert(alerts).values(rule="queue_stalled", subject="q", message="m"))
    with engine.connect() as conn:
        data = summarize(conn)
    assert data["dead_letters_24h"] == 2
    assert data["dead_letters_unresolved"] == 3
    assert data["open_alerts"] == {"queue_stalled": 1}
    print_stats(data)
    line = "dead letters: 2 in the last 24 h, 3 unresolved  open alerts: queue_stalled=1"
    assert line in capsys.readouterr().out


def test_alerts_rules_lists_thresholds_and_variables(
    run,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JOBDESK_ALERT_QUEUE_STALLED_MAX_AGE_SECONDS", "30")
    code, output = run("alerts", "rules")
    assert code == 0
    assert "max_age_seconds      30.0       JOBDESK_ALERT_QUEUE_STALLED_MAX_AGE_SECONDS" in output
    monkeypatch.setenv("JOBDESK_ALERT_QUEUE_STALLED_MAX_AGE", "30")
    result = CliRunner().invoke(cli, ["alerts", "rules"])
    assert result.exit_code == 1
    assert "did you mean JOBDESK_ALERT_QUEUE_STALLED_MAX_AGE_SECONDS?" in result.output
