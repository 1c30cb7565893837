"""A misspelt `JOBDESK_*` variable in an app that enqueues: the worker and the dashboard
refuse to start on one, but an app reads the few settings enqueue needs on demand, so
the name would be ignored without a word. `enqueue` warns once per process, naming the
closest real setting — with the same check `Settings.from_env` makes."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from jobdesk import NewJob, enqueue, enqueue_many
from jobdesk.shared.core import enqueue as enqueue_module
from jobdesk.shared.settings import SettingsError, UnknownSettingWarning, unknown_variables
from jobdesk.shared.settings.model import Settings

pytestmark = pytest.mark.one_database  # the warning cannot depend on the database

PAYLOAD = {"to": "ana@example.com", "template": "welcome"}


@pytest.fixture
def first_enqueue_of_the_process() -> Iterator[None]:
    """This process has enqueued before (other tests): check its environment again."""
    enqueue_module._warn_unknown_settings.cache_clear()
    yield
    enqueue_module._warn_unknown_settings.cache_clear()


def test_the_app_and_the_worker_share_one_check() -> None:
    environ = {"JOBDESK_MAX_PAYLOAD_BYTE": "1024", "JOBDESK_LEASE_SECONDS": "5"}
    (message,) = unknown_variables(environ)
    with pytest.raises(SettingsError) as refused:
        Settings.from_env(environ)
    assert (
        message
        == str(refused.value)
        == (
            "JOBDESK_MAX_PAYLOAD_BYTE is not a Jobdesk setting; "
            "did you mean JOBDESK_MAX_PAYLOAD_BYTES?"
        )
    )


def test_a_misspelt_variable_warns_once_per_process_at_the_callers_line(
    engine: sa.Engine, monkeypatch: pytest.MonkeyPatch, first_enqueue_of_the_process: None
) -> None:
    monkeypatch.setenv("JOBDESK_MAX_PAYLOAD_BYTE", "1024")
    monkeypatch.setenv("JOBDESK_SMTP_RATELIMIT", "5/s")
    with engine.begin() as conn, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every warning, so "once" is Jobdesk's doing
        enqueue(conn, "email.send", PAYLOAD)
        enqueue(conn, "email.send", PAYLOAD)
        enqueue_many(conn, [NewJob("email.send", PAYLOAD)])
    assert {w.category for w in caught} == {UnknownSettingWarning}
    assert [str(w.message) for w in caught] == [
        "JOBDESK_MAX_PAYLOAD_BYTE is not a Jobdesk setting; did you mean "
        "JOBDESK_MAX_PAYLOAD_BYTES? (ignored here; a worker or the dashboard would refuse "
        "to start)",
        "JOBDESK_SMTP_RATELIMIT is not a Jobdesk setting; did you mean "
        "JOBDESK_SMTP_RATE_LIMIT? (ignored here; a worker or the dashboard would refuse "
        "to start)",
    ]
    assert {Path(w.filename) for w in caught} == {Path(__file__)}


def test_known_names_pass_without_a_warning(
    engine: sa.Engine, monkeypatch: pytest.MonkeyPatch, first_enqueue_of_the_process: None
) -> None:
    """Settings and the names the test suite and benchmarks read are no typo (warnings
    are errors in this suite: a warning would fail the test)."""
    monkeypatch.setenv("JOBDESK_MAX_PAYLOAD_BYTES", "2048")
    monkeypatch.setenv("JOBDESK_LEASE_SECONDS", "5")
    monkeypatch.setenv("JOBDESK_CHAOS_SEED", "7")
    with engine.begin() as conn:
        enqueue_many(conn, [NewJob("email.send", PAYLOAD)])


@pytest.mark.slow
def test_an_app_process_prints_the_warning_once(db_url: str, tmp_path: Path) -> None:
    """What a developer sees: Python's default warning filter, one line per name."""
    app = tmp_path / "app.py"
    app.write_text(
        "import sqlalchemy as sa\n"
        "from jobdesk import enqueue\n"
        f"engine = sa.create_engine({db_url!r})\n"
        "for user in range(3):\n"
        "    with engine.begin() as conn:\n"
        "        enqueue(conn, 'email.send', {'to': f'{user}@example.com', "
        "'template': 'welcome'})\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBDESK_")}
    env["JOBDESK_DATABSE_URL"] = "postgresql+psycopg://app@db/app"
    ran = subprocess.run(
        [sys.executable, str(app)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    warned = [line for line in ran.stderr.splitlines() if "UnknownSettingWarning" in line]
    assert warned == [
        f"{app}:6: UnknownSettingWarning: JOBDESK_DATABSE_URL is not a Jobdesk setting; "
        "did you mean JOBDESK_DATABASE_URL? (ignored here; a worker or the dashboard "
        "would refuse to start)"
    ]
