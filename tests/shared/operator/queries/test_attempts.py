"""Reading attempts: gaps and durations, repeats by fingerprint, and stacks with
Jobdesk's own frames folded (from real tracebacks as well as stored text)."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

import jobdesk.worker.executor
from jobdesk import enqueue
from jobdesk.shared.core.masking import fingerprint
from jobdesk.shared.core.models import job_attempts
from jobdesk.shared.operator.queries.attempts import attempt_lines, is_own_frame, split_error
from jobdesk.worker.registry import Registry, job
from jobdesk.worker.testing import drain

T0 = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)
SITE = "/srv/app/.venv/lib/python3.12/site-packages"
OWN_FRAMES = "".join(
    f'  File "{SITE}/jobdesk/worker/{name}.py", line {10 + n}, in {name}\n    step_{n}()\n'
    for n, name in enumerate(("runner", "pool", "executor", "executor", "context", "resilience"))
)
APP_FRAME = (
    '  File "/srv/app/integrations/crm.py", line 41, in deliver\n'
    "    response.raise_for_status()\n"
    "    ^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
)
LIB_FRAME = '  File "/srv/app/.venv/lib/python3.12/site-packages/httpx/_models.py", line 8, in r\n'


def test_frames_of_the_jobdesk_package_are_recognised_in_both_layouts() -> None:
    assert is_own_frame(f"{SITE}/jobdesk/worker/executor.py")
    assert is_own_frame(f"{SITE}/jobdesk/__init__.py")
    assert is_own_frame("C:\\app\\Lib\\site-packages\\jobdesk\\shared\\core\\retry.py")
    assert is_own_frame(jobdesk.worker.executor.__file__)  # this installation (a checkout or not)
    assert not is_own_frame(__file__)
    assert not is_own_frame("/srv/jobdesk-app/jobs/crm.py")
    assert not is_own_frame(f"{SITE}/httpx/_models.py")


def test_a_stack_folds_each_run_of_jobdesk_frames_into_one_part() -> None:
    error = "HTTPStatusError: 503 from crm\nthe CRM said: busy\n" + OWN_FRAMES + APP_FRAME
    error += LIB_FRAME
    headline, rest, stack = split_error(error)
    assert headline == "HTTPStatusError: 503 from crm"
    assert rest == "the CRM said: busy"
    assert [part.folded for part in stack] == [6, 0]
    assert "runner.py" in stack[0].text
    assert "resilience.py" in stack[0].text
    assert stack[1].text.startswith('  File "/srv/app/integrations/crm.py"')
    assert "^^^^" in stack[1].text
    assert "httpx/_models.py" in stack[1].text
    # Jobdesk frames after the application's fold separately; nothing is lost.
    _, _, mixed = split_error("E: x\n" + APP_FRAME + OWN_FRAMES)
    assert [part.folded for part in mixed] == [0, 6]
    assert "\n".join(p.text for p in mixed) == (APP_FRAME + OWN_FRAMES).rstrip("\n")


def crm_handler(payload: dict[str, Any], ctx: Any) -> None:
    raise ConnectionError("CRM refused the connection")


@pytest.mark.sqlite_only
def test_an_error_a_worker_stored_folds_its_own_frames(engine: sa.Engine) -> None:
    registry = Registry()
    job("t.crm", max_attempts=1, target=registry)(crm_handler)
    with engine.begin() as conn:
        enqueue(conn, "t.crm", {})
    assert drain(engine, registry=registry).count == 1
    with engine.connect() as conn:
        (line,) = attempt_lines(r._mapping for r in conn.execute(sa.select(job_attempts)))
    assert line.headline == "ConnectionError: CRM refused the connection"
    assert line.stack[0].folded >= 1
    # Jobdesk's executor, wherever it is installed (site-packages/jobdesk/worker/ or a
    # checkout's worker/ folder).
    assert f"worker{os.sep}executor.py" in line.stack[0].text
    assert line.stack[-1].folded == 0
    assert "test_attempts.py" in line.stack[-1].text
    assert "in crm_handler" in line.stack[-1].text


def _row(number: int, start: float, took: float, error: str | None, **more: Any) -> dict[str, Any]:
    started = T0 + timedelta(seconds=start)
    return {
        "attempt": number,
        "outcome": "failed" if error else "succeeded",
        "worker_id": "app-1:42:ab",
        "started_at": started,
        "finished_at": started + timedelta(seconds=took),
        "error": error,
        "error_fingerprint": fingerprint(error),
        **more,
    }


def test_lines_show_the_backoff_gaps_durations_and_repeats() -> None:
    error = "ConnectTimeout: POST https://crm.example/hooks timed out after 10.0s"
    rows, start = [], 0.0
    for number, wait in enumerate((0, 2, 4, 8, 16), start=1):
        start += wait
        rows.append(_row(number, start, 0.5, error if number < 5 else None))
        start += 0.5
    rows[2]["error"] = rows[2]["error_fingerprint"] = "KeyError: 'user_id'"
    lines = attempt_lines(rows)
    assert [line.gap_seconds for line in lines] == [None, 2.0, 4.0, 8.0, 16.0]
    assert [line.duration_seconds for line in lines] == [0.5] * 5
    assert [line.same_as for line in lines] == [None, 1, None, 1, None]
    assert lines[2].headline == "KeyError: 'user_id'"
    assert lines[4].headline is None
    assert lines[4].stack == ()


def test_rows_without_a_start_or_a_fingerprint_still_read() -> None:
    lost = _row(1, 0, 3, "WorkerLost: the worker stopped heartbeating", error_fingerprint=None)
    lost["started_at"] = None
    again = _row(2, 10, 1, "WorkerLost: the worker stopped heartbeating", error_fingerprint=None)
    lines = attempt_lines([lost, again])
    assert lines[0].duration_seconds is None
    assert lines[0].at == lost["finished_at"]
    assert lines[1].gap_seconds == 7.0
    assert lines[1].same_as == 1
