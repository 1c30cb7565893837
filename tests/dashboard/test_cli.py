"""`jobdesk users …`, `jobdesk dead …` and `jobdesk dashboard`'s refusals."""

from __future__ import annotations

import socket

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from jobdesk.cli import cli
from jobdesk.shared.core.models import jobs
from jobdesk.shared.operator.models import operators
from tests.dashboard.conftest import SECRET, dead_job

# Roles, headers, forms and rendering: the same on either database.
pytestmark = pytest.mark.one_database


def run(db_url: str, *args: str, stdin: str | None = None) -> object:
    runner = CliRunner()
    return runner.invoke(
        cli, ["--database-url", db_url, *args], input=stdin, env={"JOBDESK_SECRET_KEY": ""}
    )


def test_users_add_list_disable(db_url: str, engine: sa.Engine) -> None:
    added = run(db_url, "users", "add", "ana", "--role", "admin", stdin="a long password\n")
    assert added.exit_code == 0, added.output
    assert "added ana (admin)" in added.output
    with engine.connect() as conn:
        stored = conn.execute(sa.select(operators.c.password_hash)).scalar_one()
    assert "a long password" not in stored
    assert (
        run(db_url, "users", "add", "ana", "--role", "viewer", stdin="a long password\n").exit_code
        == 1
    )
    short = run(db_url, "users", "add", "bob", "--role", "viewer", stdin="short\n")
    assert "at least 10 characters" in short.output
    bad_role = run(db_url, "users", "add", "bob", "--role", "root", stdin="a long password\n")
    assert bad_role.exit_code == 2
    assert "ana" in run(db_url, "users", "list").output
    assert run(db_url, "users", "disable", "ana").exit_code == 0
    assert "disabled" in run(db_url, "users", "list").output
    assert run(db_url, "users", "disable", "nobody").exit_code == 1
    demoted = run(db_url, "users", "role", "ana", "operator")
    assert demoted.exit_code == 0, demoted.output
    assert "ana is now operator" in demoted.output
    assert run(db_url, "users", "role", "nobody", "viewer").exit_code == 1
    assert run(db_url, "users", "role", "ana", "root").exit_code == 2


def test_dead_list_retry_ignore(db_url: str, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        first, second, third = dead_job(conn), dead_job(conn), dead_job(conn)
    listed = run(db_url, "dead", "list")
    assert f"#{first}" in listed.output
    groups = run(db_url, "dead", "list", "--groups")
    assert "3 dead jobs in 1 error groups" in groups.output
    retried = run(db_url, "dead", "retry", str(first), "--reason", "crm back")
    assert retried.exit_code == 0, retried.output
    assert f"requeued #{first} as #" in retried.output
    again = run(db_url, "dead", "retry", str(first))
    assert again.exit_code == 1
    assert "already requeued" in again.output
    no_reason = run(db_url, "dead", "ignore", str(second))
    assert no_reason.exit_code == 2
    bulk = run(
        db_url,
        "dead",
        "ignore",
        "--all-matching",
        "--type",
        "webhook.deliver",
        "--reason",
        "noise",
        "--yes",
    )
    assert bulk.exit_code == 0, bulk.output
    assert "ignored 2" in bulk.output
    with engine.connect() as conn:
        resolved = dict(conn.execute(sa.select(jobs.c.id, jobs.c.resolution)).all())
    assert resolved[second] == resolved[third] == "ignored"
    assert run(db_url, "dead", "retry").exit_code == 2
    assert run(db_url, "dead", "retry", "--all-matching").exit_code == 2


def test_dashboard_refuses_without_key_and_remote_debugger(db_url: str) -> None:
    no_key = run(db_url, "dashboard")
    assert no_key.exit_code == 1
    assert "JOBDESK_SECRET_KEY is not set" in no_key.output
    debug = run(db_url, "dashboard", "--host", "0.0.0.0", "--debug")
    assert debug.exit_code == 2
    assert "only on 127.0.0.1" in debug.output
    dev = run(db_url, "dashboard", "--host", "0.0.0.0", "--dev")
    assert dev.exit_code == 2


def test_dashboard_on_a_taken_port_is_one_line_without_the_banner(db_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            cli,
            ["--database-url", db_url, "dashboard", "--port", str(port)],
            env={"JOBDESK_SECRET_KEY": SECRET},
        )
    assert result.exit_code == 1
    assert result.output == (
        f"Error: cannot listen on 127.0.0.1:{port}: the port is in use "
        "(stop the other program or pass another --port)\n"
    )


def test_users_add_and_passwd_refuse_weak_passwords_and_case_twins(db_url: str) -> None:
    common = run(db_url, "users", "add", "ana", "--role", "admin", stdin="Qwertyuiop\n")
    assert common.exit_code == 1
    assert "most common passwords" in common.output
    own_name = run(db_url, "users", "add", "anabel", "--role", "admin", stdin="hi anabel 2026\n")
    assert own_name.exit_code == 1
    assert "must not contain the username" in own_name.output
    assert (
        run(db_url, "users", "add", "ana", "--role", "admin", stdin="a long password\n").exit_code
        == 0
    )
    twin = run(db_url, "users", "add", "ANA", "--role", "viewer", stdin="a long password\n")
    assert twin.exit_code == 1
    assert "case-insensitive" in twin.output
    weak = run(db_url, "users", "passwd", "ana", stdin="password123\n")
    assert weak.exit_code == 1
    assert "most common passwords" in weak.output
    changed = run(db_url, "users", "passwd", "Ana", stdin="another long one\n")
    assert changed.exit_code == 0, changed.output
