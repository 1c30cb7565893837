"""The zygote the worker and CLI tests fork their `jobdesk` commands from behaves as a
started process would: argv, environment, working directory, output, exit status."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import zygote
from tests.worker.procs import wait_for

# They fork `jobdesk` processes: with the tests that start worker processes.
pytestmark = pytest.mark.slow

JOBDESK = str(Path(sys.executable).with_name("jobdesk"))
REPO = Path(__file__).resolve().parents[1]


def _env(**extra: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("JOBDESK_")} | extra


def _forked(
    argv: list[str], tmp_path: Path, *, cwd: Path | None = None, **env: str
) -> tuple[zygote.ForkedProcess, Path]:
    """`argv` forked in `cwd` (default `tmp_path`), its output in `tmp_path/out.log`."""
    log = tmp_path / "out.log"
    with log.open("wb") as out:
        proc = zygote.Zygote.get().spawn(
            argv, env=_env(**env), cwd=cwd or tmp_path, stdout=out.fileno()
        )
    return proc, log


def test_a_forked_command_runs_in_its_directory_and_exits_with_its_status(
    tmp_path: Path,
) -> None:
    proc, log = _forked([JOBDESK, "migrate"], tmp_path)
    assert proc.wait(60) == 0, log.read_text()
    assert (tmp_path / "jobdesk.db").exists()  # the zero-setup default, in the cwd

    proc, log = _forked([JOBDESK, "no-such-command"], tmp_path)
    assert proc.wait(60) == 2
    assert "No such command" in log.read_text()


def test_a_forked_command_sees_its_own_environment(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    proc, log = _forked([JOBDESK, "migrate"], tmp_path, JOBDESK_DATABASE_URL=url)
    assert proc.wait(60) == 0, log.read_text()
    assert (tmp_path / "elsewhere.db").exists()
    assert not (tmp_path / "jobdesk.db").exists()


def test_a_forked_worker_reads_its_failpoints_and_dies_by_their_signal(tmp_path: Path) -> None:
    env = _env(JOBDESK_DATABASE_URL=f"sqlite:///{tmp_path / 'jobs.db'}")
    assert zygote.run([JOBDESK, "migrate"], env=env).returncode == 0
    enqueued = zygote.run([JOBDESK, "enqueue", "t.effect", '{"key": "k1"}'], env=env)
    assert enqueued.returncode == 0, enqueued.stderr
    # Read at import time in a started process; the zygote imported the worker without it.
    proc, log = _forked(
        [JOBDESK, "worker", "--jobs", "tests.worker.jobmods.basic"],
        tmp_path,
        cwd=REPO,
        JOBDESK_DATABASE_URL=env["JOBDESK_DATABASE_URL"],
        JOBDESK_TEST_FAILPOINTS="after_claim:#1",
    )
    assert proc.wait(60) == -signal.SIGKILL, log.read_text()
    assert "failpoint after_claim fired" in log.read_text()
    proc.kill()  # reaped: a no-op, never a signal to whatever took the pid since


def test_a_forked_process_can_be_waited_for_with_a_timeout(tmp_path: Path) -> None:
    env = _env(JOBDESK_DATABASE_URL=f"sqlite:///{tmp_path / 'jobs.db'}")
    assert zygote.run([JOBDESK, "migrate"], env=env).returncode == 0
    proc, log = _forked(
        [JOBDESK, "worker", "--jobs", "tests.worker.jobmods.basic"],
        tmp_path,
        cwd=REPO,
        JOBDESK_DATABASE_URL=env["JOBDESK_DATABASE_URL"],
    )
    wait_for(lambda: "worker_started" in log.read_text() or proc.poll() is not None, 30)
    assert proc.poll() is None, log.read_text()
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(0.1)
    proc.terminate()
    assert proc.wait(30) == 0, log.read_text()  # a clean shutdown on SIGTERM


def test_run_captures_stdout_and_stderr_apart(tmp_path: Path) -> None:
    done = zygote.run([JOBDESK, "--help"], env=_env(), cwd=tmp_path)
    assert done.returncode == 0
    assert "Usage" in done.stdout
    assert done.stderr == ""
    failed = zygote.run([JOBDESK, "no-such-command"], env=_env(), cwd=tmp_path)
    assert failed.returncode == 2
    assert "No such command" in failed.stderr
    assert failed.stdout == ""
