"""A worker whose own clock is an hour ahead still signs webhooks with the database's
time: its deliveries verify at a receiver with a correct clock (5-minute tolerance).

The wrong clock is real: the delivery runs in a subprocess under Debian's libfaketime
(`FAKETIME=+1h`). Without libfaketime the test fails under CI (which installs it) and
is skipped elsewhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import sqlalchemy as sa

from jobdesk import enqueue
from tests.chaos.partitions import libfaketime
from tests.factories import job_row
from tests.worker.jobs.conftest import add_test_endpoint
from tests.worker.jobs.receiver import Receiver

pytestmark = pytest.mark.usefixtures("jobs_env")

DRAIN = (
    "import sys, datetime\n"
    "from jobdesk.shared.core.db import make_engine\n"
    "from jobdesk.worker.testing import drain\n"
    "import jobdesk.worker.jobs\n"
    "print(datetime.datetime.now(datetime.UTC).isoformat(), flush=True)\n"
    "print(drain(make_engine(sys.argv[1])).succeeded)\n"
)


# SQLite's clock is the process's own: only a database server has a time of its own.
@pytest.mark.slow
@pytest.mark.postgresql_only
def test_a_host_an_hour_ahead_signs_with_database_time(
    engine: sa.Engine, receiver: Receiver
) -> None:
    library = libfaketime()
    if library is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("libfaketime missing (Debian package faketime)")
        pytest.skip("libfaketime missing (Debian package faketime)")
    receiver.secrets.append(add_test_endpoint(engine, "crm", receiver.url("/ok")))
    with engine.begin() as conn:
        job_id = enqueue(
            conn, "webhook.deliver", {"endpoint": "crm", "event": "user.created", "data": {}}
        )
    url = engine.url.render_as_string(hide_password=False)
    env = dict(os.environ, LD_PRELOAD=library, FAKETIME="+1h")
    done = subprocess.run(
        [sys.executable, "-c", DRAIN, url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    host_time, succeeded = done.stdout.split()
    assert host_time.startswith(time.strftime("%Y-%m-%dT%H", time.gmtime(time.time() + 3600)))
    assert succeeded == "1", done.stderr
    [seen] = receiver.seen
    assert seen.verified
    assert abs(int(seen.timestamp) - time.time()) < 60
    with engine.connect() as conn:
        assert job_row(conn, job_id).status == "succeeded"
