"""pytest entry of the torture suite.

- The checker must fail what it is meant to fail (a checker that passes everything
  proves nothing): synthetic lost, stuck, doubly applied and unplanned-dead jobs on
  both databases.
- Failpoints: off by default, parsed strictly, and a hit really SIGKILLs the process.
- A whole chaos run (`JOBDESK_CHAOS=ci|partition|sqlite|dbfaults|soak`, seed
  `JOBDESK_CHAOS_SEED`) — opt-in, because `.ci/run` runs the profiles as their own
  step (`python -m tests.chaos`), after the main suite.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.models import job_attempts
from jobdesk.worker import failpoints
from tests.chaos.__main__ import partition_unavailable
from tests.chaos.checker import Planned, check
from tests.chaos.driver import ChaosRun
from tests.chaos.profiles import PROFILES
from tests.chaos.receivers import SmtpSink, WebhookReceiver
from tests.chaos.tables import chaos_effects, chaos_once, metadata
from tests.factories import make_job


def _attempt(
    conn: sa.Connection, job_id: int, attempt: int, outcome: str, error: str | None = None
) -> None:
    conn.execute(
        sa.insert(job_attempts).values(
            job_id=job_id, attempt=attempt, worker_id="w", outcome=outcome, error=error
        )
    )


@pytest.fixture
def outside() -> Iterator[tuple[WebhookReceiver, SmtpSink]]:
    receiver, sink = WebhookReceiver(random.Random(0)).start(), SmtpSink().start()
    yield receiver, sink
    receiver.stop()
    sink.stop()


def test_checker_fails_lost_stuck_double_and_unplanned_dead(
    engine: sa.Engine, outside: tuple[WebhookReceiver, SmtpSink]
) -> None:
    metadata.drop_all(engine)  # the PostgreSQL test database lives for the session
    metadata.create_all(engine)
    receiver, sink = outside
    with engine.begin() as conn:
        ok = make_job(conn, job_type="chaos.effect", status="succeeded", attempts=1)
        dup = make_job(conn, job_type="chaos.once", status="succeeded", attempts=2)
        stuck = make_job(conn, job_type="chaos.effect", status="running", attempts=1)
        double = make_job(conn, job_type="chaos.effect", status="succeeded", attempts=2)
        dead = make_job(conn, job_type="chaos.effect", status="dead", attempts=1)
        planted = make_job(conn, job_type="chaos.effect", status="dead", attempts=1)
        twice = make_job(conn, job_type="chaos.effect", status="succeeded", attempts=2)
        for job_id in (ok, dup, double):
            _attempt(conn, job_id, 1, "succeeded")
        _attempt(conn, twice, 1, "succeeded")
        _attempt(conn, twice, 2, "succeeded")
        conn.execute(
            sa.insert(chaos_effects),
            [
                {"key": key, "job_id": 0, "attempt": 1, "worker": "w"}
                for key in ("k-ok", "k-double", "k-double", "k-twice")
            ],
        )
        conn.execute(sa.insert(chaos_once).values(key="k-dup", deliveries=2))
    planned = [
        Planned("k-ok", ok, "chaos.effect", dies=False),
        Planned("k-dup", dup, "chaos.once", dies=False),
        Planned("k-stuck", stuck, "chaos.effect", dies=False),
        Planned("k-double", double, "chaos.effect", dies=False),
        Planned("k-dead", dead, "chaos.effect", dies=False),
        Planned("k-planted", planted, "chaos.effect", dies=True),
        Planned("k-twice", twice, "chaos.effect", dies=False),
        Planned("k-lost", 999_999, "chaos.effect", dies=False),
    ]
    verdict = check(engine, planned, receiver, sink)
    assert dict(verdict.classes) == {
        "succeeded once": 1,
        "succeeded after a caught duplicate": 1,
        "stuck running": 1,
        "effect applied twice": 1,
        "dead unplanned": 1,
        "dead as planted": 1,
        "completed twice": 1,
        "lost": 1,
    }
    assert not verdict.passed
    assert len(verdict.failures) == 5


def test_checker_counts_webhook_ids_and_message_ids_per_event(
    engine: sa.Engine, outside: tuple[WebhookReceiver, SmtpSink]
) -> None:
    metadata.drop_all(engine)  # the PostgreSQL test database lives for the session
    metadata.create_all(engine)
    receiver, sink = outside
    receiver._apply("msg_a", b'{"data": {"key": "hook-once"}}')
    receiver._apply("msg_a", b'{"data": {"key": "hook-once"}}')  # a caught repeat
    receiver._apply("msg_b", b'{"data": {"key": "hook-twice"}}')
    receiver._apply("msg_c", b'{"data": {"key": "hook-twice"}}')  # a new id: applied again
    sink.handler.by_key["mail"] = {"<m1@x>"}
    sink.handler.accepted["<m1@x>"] = 1
    with engine.begin() as conn:
        ids = [
            make_job(conn, job_type=t, status="succeeded", attempts=1)
            for t in ("webhook.deliver", "webhook.deliver", "email.send")
        ]
        for job_id in ids:
            _attempt(conn, job_id, 1, "succeeded")
    verdict = check(
        engine,
        [
            Planned("hook-once", ids[0], "webhook.deliver", dies=False),
            Planned("hook-twice", ids[1], "webhook.deliver", dies=False),
            Planned("mail", ids[2], "email.send", dies=False),
        ],
        receiver,
        sink,
    )
    assert dict(verdict.classes) == {
        "succeeded after a caught duplicate": 1,
        "effect applied twice": 1,
        "succeeded once": 1,
    }


def test_checker_fails_doubled_effects_and_attempts_spent_by_database_trouble(
    engine: sa.Engine, outside: tuple[WebhookReceiver, SmtpSink]
) -> None:
    """A same-database effect applied twice, and an attempt a database error in
    Jobdesk's own calls spent, each fail the run; a database error in the handler's own
    work is the handler's failure (reported, not failed); handlers that end in
    SystemExit & co. must end dead, never stuck."""
    metadata.drop_all(engine)
    metadata.create_all(engine)
    receiver, sink = outside
    with engine.begin() as conn:
        once_db = make_job(conn, job_type="chaos.once_db", status="succeeded", attempts=2)
        burned = make_job(conn, job_type="chaos.once", status="succeeded", attempts=2)
        own = make_job(conn, job_type="chaos.effect", status="succeeded", attempts=2)
        aborted = make_job(conn, job_type="chaos.abort", status="dead", attempts=2)
        stuck = make_job(conn, job_type="chaos.abort", status="running", attempts=1)
        for job_id in (once_db, burned, own):
            _attempt(conn, job_id, 2, "succeeded")
        _attempt(conn, once_db, 1, "lost")
        _attempt(conn, burned, 1, "failed", "OperationalError: (psycopg.OperationalError) x")
        _attempt(conn, own, 1, "failed", "HandlerDatabaseError: OperationalError: x")
        _attempt(conn, aborted, 1, "failed", "SystemExit: 2")
        _attempt(conn, aborted, 2, "failed", "SystemExit: 2")
        conn.execute(
            sa.insert(chaos_effects),
            [
                {"key": key, "job_id": 0, "attempt": 1, "worker": "w"}
                for key in ("k-db", "k-db", "k-own")
            ],
        )
        conn.execute(sa.insert(chaos_once).values(key="k-burned", deliveries=1))
    verdict = check(
        engine,
        [
            Planned("k-db", once_db, "chaos.once_db", dies=False),
            Planned("k-burned", burned, "chaos.once", dies=False),
            Planned("k-own", own, "chaos.effect", dies=False),
            Planned("k-aborted", aborted, "chaos.abort", dies=True),
            Planned("k-stuck", stuck, "chaos.abort", dies=True),
        ],
        receiver,
        sink,
    )
    assert dict(verdict.classes) == {
        "effect applied twice": 1,
        "succeeded once": 2,
        "dead as planted": 1,
        "stuck running": 1,
    }
    assert verdict.doubled_effects == 1
    assert verdict.db_attempts == 1
    assert verdict.handler_db_attempts == 1
    assert any("1 attempt(s) spent by database trouble" in f for f in verdict.failures)
    assert len(verdict.failures) == 3


def test_failpoints_are_off_unless_configured() -> None:
    if os.environ.get(failpoints.ENV):
        pytest.skip("failpoints armed in this environment")
    assert failpoints.hit.__name__ == "_noop"
    failpoints.hit(failpoints.AFTER_CLAIM)  # does nothing


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nowhere:0.5", "unknown failpoint 'nowhere'"),
        ("after_claim", "expected after_claim:P"),
        ("after_claim:1.5", "probability 0..1"),
        ("after_claim:#0", "#N (N >= 1)"),
        ("after_claim:often", "probability 0..1"),
    ],
)
def test_failpoint_spec_errors_name_the_problem(spec: str, message: str) -> None:
    with pytest.raises(failpoints.FailpointSpecError, match=re.escape(message)):
        failpoints.parse(spec)


def test_failpoint_spec_can_freeze_instead_of_kill() -> None:
    points = failpoints.parse("in_renew:stop:#3, after_claim:0.5")
    assert points["in_renew"] == failpoints.Point(0.0, 3, signal.SIGSTOP)
    assert points["after_claim"] == failpoints.Point(0.5, 0, signal.SIGKILL)


def test_failpoint_fires_on_the_nth_hit_with_sigkill() -> None:
    code = (
        "from jobdesk.worker import failpoints\n"
        "failpoints.hit('after_claim')\n"
        "print('survived first hit', flush=True)\n"
        "failpoints.hit('after_claim')\n"
        "print('not reached', flush=True)\n"
    )
    env = {**os.environ, failpoints.ENV: "after_claim:#2, mid_completion:0"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == -signal.SIGKILL
    assert done.stdout == "survived first hit\n"
    assert "failpoint after_claim fired" in done.stderr


@pytest.mark.slow
def test_chaos_profile() -> None:
    name = os.environ.get("JOBDESK_CHAOS", "")
    if not name:
        pytest.skip(
            "set JOBDESK_CHAOS=ci|pgbouncer|partition|sqlite|dbfaults|soak to run a whole "
            "chaos run here"
        )
    profile = PROFILES[name]
    if profile.hosts and (reason := partition_unavailable(profile)):
        pytest.skip(reason)
    seed = int(os.environ.get("JOBDESK_CHAOS_SEED") or random.randrange(1, 1_000_000))
    lines: list[str] = []
    passed = ChaosRun(profile, seed, out=lines.append).run()
    assert passed, "\n".join(lines)


def test_the_suites_own_modules_leave_the_built_in_types_alone() -> None:
    """Only the chaos workers import `tests.chaos.jobmods`, which gives the built-in
    types fast retries: a test process that imports the checker or the driver keeps
    their real policies (the webhook tests read them)."""
    code = (
        "import sys, tests.chaos.checker, tests.chaos.driver, tests.chaos.__main__; "
        "print('tests.chaos.jobmods' in sys.modules)"
    )
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert found.stdout.strip() == "False"
