"""Jobdesk through a stock PgBouncer in transaction pooling mode (`JOBDESK_PGBOUNCER=1`).

Every piece goes through a real pgbouncer process: `jobdesk migrate`, `enqueue` (the
API and the CLI), real worker subprocesses draining jobs with retries, a timeout and a
rescue of a frozen worker whose late outcome is fenced, and the dashboard. Separately:
statement deadlines hold without the startup `options` PgBouncer refuses, and nothing
a Jobdesk transaction does stays behind in the server session the next client gets.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from jobdesk import NewJob, enqueue, enqueue_many
from jobdesk.dashboard import create_app
from jobdesk.shared.core.claim import claim
from jobdesk.shared.core.db import make_engine, one_statement, sets_deadlines_per_transaction
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.notifications import listen_url
from jobdesk.shared.core.transitions import complete
from jobdesk.shared.operator.commands.accounts import add_operator
from jobdesk.shared.operator.queries.jobs import statement_deadline
from jobdesk.shared.settings import Settings, SettingsError
from jobdesk.worker.budget import budget_for
from jobdesk.worker.resilience import DB_ERRORS
from tests import zygote
from tests.dashboard.conftest import PASSWORD, SECRET, Browser
from tests.integration.conftest import BouncedDatabase
from tests.worker.procs import Workers, attempts_of, effect_rows, wait_for
from tests.worker.procs import job as job_row

# Each test starts PgBouncer (and most a worker or the CLI) as processes: seconds each.
pytestmark = pytest.mark.slow

JOBDESK = Path(sys.executable).with_name("jobdesk")
REPO = Path(__file__).resolve().parents[2]
BOUNCED = Settings(pgbouncer=True)


def _env(database: BouncedDatabase, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("JOBDESK_")}
    return base | {"JOBDESK_DATABASE_URL": database.bounced_url, "JOBDESK_PGBOUNCER": "1"} | extra


def _cli(database: BouncedDatabase, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return zygote.run([str(JOBDESK), *args], cwd=REPO, env=_env(database, **env), timeout=60)


@pytest.fixture(scope="module")
def migrated(bounced: BouncedDatabase) -> BouncedDatabase:
    """`jobdesk migrate` through PgBouncer: the schema comes up in one transaction."""
    done = _cli(bounced, "migrate")
    assert done.returncode == 0, done.stderr
    return bounced


@pytest.fixture
def engine(migrated: BouncedDatabase) -> Iterator[sa.Engine]:
    engine = make_engine(migrated.bounced_url, settings=BOUNCED)
    with engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE jobdesk_jobs, jobdesk_effects RESTART IDENTITY CASCADE"))
    yield engine
    engine.dispose()


@pytest.fixture
def procs(migrated: BouncedDatabase, tmp_path: Path) -> Iterator[Workers]:
    pool = Workers(migrated.bounced_url, tmp_path)
    yield pool
    pool.cleanup()


def test_pgbouncer_refuses_the_startup_options_and_the_mode_connects_without_them(
    migrated: BouncedDatabase,
) -> None:
    refused = make_engine(migrated.bounced_url, settings=Settings())
    refusal = "unsupported startup parameter: options"
    with pytest.raises(sa.exc.OperationalError, match=refusal), refused.connect():
        pass
    refused.dispose()
    done = _cli(migrated, "stats", JOBDESK_PGBOUNCER="0")
    assert done.returncode == 1
    assert "set JOBDESK_PGBOUNCER=1" in done.stderr, done.stderr

    engine = make_engine(migrated.bounced_url, settings=BOUNCED)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT 1")).scalar() == 1
    engine.dispose()


def test_migrate_is_idempotent_and_enqueue_works_from_the_cli(migrated: BouncedDatabase) -> None:
    again = _cli(migrated, "migrate")
    assert again.returncode == 0, again.stderr
    first = _cli(migrated, "enqueue", "t.effect", '{"key": "cli"}', "--idempotency-key", "cli-1")
    second = _cli(migrated, "enqueue", "t.effect", '{"key": "cli"}', "--idempotency-key", "cli-1")
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    assert first.stdout.split()[-1] == second.stdout.split()[-1]  # same job, not a duplicate


def test_workers_drain_retries_timeouts_and_a_fenced_rescue_through_pgbouncer(
    engine: sa.Engine, procs: Workers, migrated: BouncedDatabase
) -> None:
    with engine.begin() as conn:
        ids = enqueue_many(conn, [NewJob("t.effect", {"key": f"k{i}"}) for i in range(200)])
        flaky = enqueue(conn, "t.flaky", {"fail_times": 2})
        hang = enqueue(conn, "t.hang", {}, max_attempts=2)
    # Polling only (no JOBDESK_LISTEN_URL): the worker says so.
    first = procs.start("--concurrency", "4", env={"JOBDESK_PGBOUNCER": "1"})
    second = procs.start("--concurrency", "4", env={"JOBDESK_PGBOUNCER": "1"})
    assert "no LISTEN through PgBouncer" in first.log()

    def done() -> bool:
        with engine.connect() as conn:
            return not conn.execute(
                sa.select(sa.func.count())
                .select_from(jobs)
                .where(jobs.c.status.in_(["queued", "running", "failed"]))
            ).scalar()

    wait_for(done, 40)
    assert len(effect_rows(engine, "done:")) == 200  # each effect exactly once
    assert {job_row(engine, i).status for i in ids} == {"succeeded"}
    assert job_row(engine, flaky).status == "succeeded"
    assert [a.outcome for a in attempts_of(engine, flaky)] == ["failed", "failed", "succeeded"]
    assert job_row(engine, hang).status == "dead"
    assert [a.outcome for a in attempts_of(engine, hang)] == ["timeout", "timeout"]

    # Rescue: freeze the worker running a job; the other one takes it over after the
    # lease, and the frozen one's late outcome changes nothing.
    with engine.begin() as conn:
        slow = enqueue(conn, "t.sleep", {"seconds": 4, "first_only": True})
    started = wait_for(lambda: effect_rows(engine, f"run:{slow}:1"), 15)
    holder = job_row(engine, slow).locked_by
    frozen = next(w for w in (first, second) if f":{w.pid}:" in (holder or ""))
    frozen.signal(signal.SIGSTOP)
    try:
        wait_for(lambda: job_row(engine, slow).status == "succeeded", 20)
    finally:
        frozen.signal(signal.SIGCONT)
    rescued = job_row(engine, slow)
    assert rescued.attempts == 2
    assert rescued.locked_by is None
    assert started
    assert effect_rows(engine, f"run:{slow}:2")
    wait_for(lambda: "lease_lost" in frozen.log() or "fenced" in frozen.log(), 15)
    time.sleep(4.5)  # the frozen handler's sleep ends: its outcome must be fenced
    after = job_row(engine, slow)
    assert (after.status, after.attempts, after.finished_at) == (
        "succeeded",
        2,
        rescued.finished_at,
    )
    for worker in (first, second):
        assert worker.stop() == 0, worker.log()


def test_a_listen_url_wakes_workers_behind_pgbouncer(
    engine: sa.Engine, procs: Workers, migrated: BouncedDatabase
) -> None:
    env = {
        "JOBDESK_PGBOUNCER": "1",
        "JOBDESK_LISTEN_URL": migrated.direct_url,
        "JOBDESK_POLL_INTERVAL_SECONDS": "30",
    }
    worker = procs.start("--concurrency", "2", env=env)
    assert "no LISTEN through PgBouncer" not in worker.log()
    time.sleep(1.0)  # past the start-up claim: only a wake-up finds the next job
    with engine.begin() as conn:
        job_id = enqueue(conn, "t.effect", {"key": "woken"})
    wait_for(lambda: job_row(engine, job_id).status == "succeeded", 5)
    assert worker.stop() == 0, worker.log()


def test_the_dashboard_reads_and_acts_through_pgbouncer(
    engine: sa.Engine, migrated: BouncedDatabase
) -> None:
    now = datetime.now(UTC)
    with engine.begin() as conn:
        add_operator(conn, "ops", PASSWORD, "operator", now=now)
        dead_id = enqueue(conn, "t.permanent", {"why": "pgbouncer"})
        conn.execute(
            sa.update(jobs)
            .where(jobs.c.id == dead_id)
            .values(status="dead", last_error="PermanentError: account deleted", finished_at=now)
        )
    settings = dataclasses.replace(
        BOUNCED,
        database_url=migrated.bounced_url,
        secret_key=SECRET,
        dashboard_overview_cache_seconds=0,
    )
    app = create_app(settings)
    app.config["TESTING"] = True
    try:
        browser = Browser(app.test_client())
        browser.login("ops")
        for page in ("/", "/jobs", f"/jobs/{dead_id}", "/dead", "/workers", "/queues", "/audit"):
            response = browser.get(page)
            assert response.status_code == 200, (page, response.get_data(as_text=True)[:500])
        assert "account deleted" in browser.get("/dead").get_data(as_text=True)
        ignored = browser.post(f"/jobs/{dead_id}/ignore", {"reason": "through the pooler"})
        assert ignored.status_code == 303
        assert job_row(engine, dead_id).resolution == "ignored"
        assert "through the pooler" in browser.get("/audit").get_data(as_text=True)
    finally:
        app.extensions["jobdesk"].dispose()


def test_statement_deadlines_hold_through_pgbouncer_and_directly(
    migrated: BouncedDatabase,
) -> None:
    short = dataclasses.replace(BOUNCED, db_statement_timeout_seconds=0.3)
    for url, settings in (
        (migrated.bounced_url, short),
        (migrated.direct_url, dataclasses.replace(short, pgbouncer=False)),
    ):
        engine = make_engine(url, settings=settings)
        started = time.monotonic()
        with (
            pytest.raises(sa.exc.OperationalError, match="statement timeout"),
            engine.begin() as conn,
        ):
            conn.execute(sa.text("SELECT pg_sleep(3)"))
        assert time.monotonic() - started < 2
        # Work Jobdesk runs one statement at a time keeps its deadline too.
        with (
            pytest.raises(sa.exc.OperationalError, match="statement timeout"),
            one_statement(engine).begin() as conn,
        ):
            conn.execute(sa.text("SELECT pg_sleep(3)"))
        engine.dispose()


def test_a_connection_pgbouncer_dropped_is_thrown_away_not_pooled(
    migrated: BouncedDatabase,
) -> None:
    """When PgBouncer drops a client (a server restart, `KILL`), the transaction that
    sets the deadlines is the first to see it: that connection is discarded, and the
    next transaction gets a working one."""
    engine = make_engine(migrated.bounced_url, settings=BOUNCED, pool_size=1)
    held = engine.connect()
    with held.begin():
        held.execute(sa.text("SELECT 1"))
    migrated.bouncer.admin(f"KILL {_dbname(migrated)}")
    migrated.bouncer.admin(f"RESUME {_dbname(migrated)}")
    with pytest.raises(sa.exc.OperationalError), held.begin():
        held.execute(sa.text("SELECT 1"))
    assert held.invalidated
    held.close()
    with engine.begin() as conn:
        assert conn.execute(sa.text("SELECT 1")).scalar() == 1
    engine.dispose()


def test_a_commit_on_a_server_connection_that_died_is_an_outage_not_a_bug(
    migrated: BouncedDatabase,
) -> None:
    """The server ends the backend of an open transaction (a restart, a terminated
    session): PgBouncer answers the COMMIT with the backend's goodbye and its own error,
    which psycopg reports as "received 2 results from command 'COMMIT'" (an
    `InternalError`). It is an outage like a dropped connection — raised as a retryable
    `OperationalError`, that connection thrown away — not a bug that ends an attempt."""
    engine = make_engine(migrated.bounced_url, settings=BOUNCED, pool_size=1)
    held = engine.connect()
    transaction = held.begin()
    pid = held.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
    with psycopg.connect(migrated.direct_url.replace("+psycopg", ""), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(sa.exc.OperationalError, match="COMMIT") as raised:
        transaction.commit()
    assert raised.value.connection_invalidated
    assert isinstance(raised.value, DB_ERRORS)
    held.close()
    with engine.begin() as conn:
        assert conn.execute(sa.text("SELECT 1")).scalar() == 1
    engine.dispose()


def test_deadlines_from_the_role_need_no_statement_per_transaction(
    single_server_connection: BouncedDatabase,
) -> None:
    database = single_server_connection
    from_role = dataclasses.replace(BOUNCED, db_timeouts_from_role=True)
    refused = make_engine(database.bounced_url, settings=from_role)
    with pytest.raises(SettingsError, match="statement_timeout is 0 for this role"):
        refused.connect()
    refused.dispose()
    database.bouncer.admin("RECONNECT")  # the next server connection sees the default
    with psycopg.connect(database.direct_url.replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE \"{_dbname(database)}\" SET statement_timeout = '300ms'")
    engine = make_engine(database.bounced_url, settings=from_role)
    assert not sets_deadlines_per_transaction(engine)
    assert one_statement(engine).get_execution_options()["isolation_level"] == "AUTOCOMMIT"
    for bind in (engine, one_statement(engine)):
        with pytest.raises(sa.exc.OperationalError, match="statement timeout"), bind.begin() as c:
            c.execute(sa.text("SELECT pg_sleep(3)"))
    with engine.begin() as conn:  # nothing was sent to set it: it is the database's own
        assert conn.execute(sa.text("SHOW statement_timeout")).scalar() == "300ms"
    engine.dispose()


def test_no_session_state_leaks_between_transactions(
    single_server_connection: BouncedDatabase,
) -> None:
    """Client A does Jobdesk's work; client B then gets the same server connection (the
    pool has one) and finds it as a fresh session: no settings, prepared statements,
    advisory locks, LISTENs or temporary tables left behind."""
    database = single_server_connection
    engine = make_engine(database.bounced_url, settings=BOUNCED)
    with engine.connect() as conn:
        server_pid = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar()
        conn.rollback()
    # More repetitions than psycopg's prepare threshold (5).
    for round_ in range(8):
        with engine.begin() as conn:
            enqueue(conn, "t.effect", {"key": f"leak{round_}"}, idempotency_key=f"leak{round_}")
        with one_statement(engine).begin() as conn:
            claimed = claim(conn, worker_id="leak-check", limit=1)
        with engine.begin() as conn:
            for item in claimed:
                complete(conn, item.ref, result={"ok": round_}, now=datetime.now(UTC))
        with engine.begin() as conn, statement_deadline(conn, 2.0):
            conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar()
    engine.dispose()

    other = f"host=127.0.0.1 port={database.bouncer.port} user=root dbname={_dbname(database)}"
    with psycopg.connect(other, prepare_threshold=None, autocommit=True) as conn:
        state = _session_state(conn)
        assert state["pid"] == server_pid  # the very session client A used
        assert state == {
            "pid": server_pid,
            "session_settings": [],
            "prepared": 0,
            "advisory_locks": 0,
            "listening": [],
            "temp_tables": 0,
            "statement_timeout": "0",
        }
        # The check sees a leak when there is one: a session-level SET stays behind.
        conn.execute("SET statement_timeout = 1234")
    with psycopg.connect(other, prepare_threshold=None, autocommit=True) as conn:
        assert _session_state(conn)["session_settings"] == [("statement_timeout", "1234")]
        conn.execute("RESET statement_timeout")
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar() == 8
    engine.dispose()


def _dbname(database: BouncedDatabase) -> str:
    return str(sa.make_url(database.direct_url).database)


def _session_state(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    def one(sql: str) -> Any:
        row = conn.execute(sql).fetchone()  # type: ignore[arg-type]
        assert row is not None
        return row[0]

    return {
        "pid": one("SELECT pg_backend_pid()"),
        # PgBouncer itself sets the few parameters it tracks per client (application_name,
        # client_encoding, DateStyle, TimeZone, standard_conforming_strings) on every
        # hand-over; anything else set for the session would be a leak.
        "session_settings": conn.execute(
            "SELECT name, setting FROM pg_settings WHERE source = 'session' AND name NOT IN "
            "('application_name', 'client_encoding', 'DateStyle', 'TimeZone', "
            "'standard_conforming_strings') ORDER BY name"
        ).fetchall(),
        "prepared": one("SELECT count(*) FROM pg_prepared_statements"),
        "advisory_locks": one(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
        ),
        "listening": conn.execute("SELECT pg_listening_channels()").fetchall(),
        "temp_tables": one(
            "SELECT count(*) FROM pg_class WHERE relpersistence = 't' AND relkind = 'r'"
        ),
        "statement_timeout": one("SHOW statement_timeout"),
    }


def test_settings_for_pgbouncer() -> None:
    env = {"JOBDESK_PGBOUNCER": "1", "JOBDESK_LISTEN_URL": "postgresql://app@db:5432/app"}
    settings = Settings.from_env(env)
    assert settings.pgbouncer
    assert settings.listen_url == "postgresql://app@db:5432/app"
    with pytest.raises(
        SettingsError, match=r"JOBDESK_LISTEN_URL: not a PostgreSQL URL \(mysql"
    ) as bad:
        Settings.from_env({"JOBDESK_LISTEN_URL": "mysql://root:hunter2@db/app"})
    assert "hunter2" not in str(bad.value)  # a password is never echoed
    # Only the direct LISTEN connection counts against max_connections behind PgBouncer.
    assert budget_for(10, settings, 4).per_process == 1
    assert budget_for(10, dataclasses.replace(settings, listen_url=None), 4).per_process == 0
    assert budget_for(10, Settings(), 4).per_process > 10


def test_where_workers_listen(migrated: BouncedDatabase) -> None:
    bounced = make_engine(migrated.bounced_url, settings=BOUNCED)
    direct = make_engine(migrated.direct_url, settings=Settings())
    assert listen_url(bounced, None) is None  # polling
    assert listen_url(bounced, migrated.direct_url) == sa.make_url(migrated.direct_url)
    assert listen_url(direct, None) == direct.url
    bounced.dispose()
    direct.dispose()


def test_a_worker_that_cannot_reach_the_database_at_start_waits_for_it(tmp_path: Path) -> None:
    """PgBouncer refusing logins for a moment after a server restart (or the server
    itself being down) must not end a worker that is just starting."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBDESK_")}
    env |= {
        "JOBDESK_DATABASE_URL": "postgresql+psycopg://root@127.0.0.1:1/none",
        "JOBDESK_DB_CONNECT_TIMEOUT_SECONDS": "1",
    }
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(JOBDESK), "worker", "--jobs", "tests.worker.jobmods.basic"],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: "database unavailable" in log.read_text(), 20)
        assert proc.poll() is None, log.read_text()
        assert "connection budget not checked" in log.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(20)
    assert code == 0, log.read_text()
