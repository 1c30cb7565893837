"""Two `jobdesk demo` processes given one `--dir`: the second is refused in one line
naming the first (its pid and dashboard URL) and touches nothing; the lock dies with
its process, so after a SIGKILL the next demo starts without any clean-up."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from jobdesk.demo.lock import DirectoryBusy, DirectoryLock
from jobdesk.demo.sinks import free_port
from tests.demo.process import DemoProcess

FAST = ("--users", "1", "--speed", "10", "--dir", "shared-demo")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_second_demo_in_the_same_directory_is_refused_naming_the_first(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "shared-demo"
    first = DemoProcess(tmp_path, "--port", str(free_port()), *FAST)
    try:
        dashboard = first.printed("Dashboard:")
        database = directory / "jobdesk.db"
        before = database.stat()

        second_port = free_port()
        second = DemoProcess(tmp_path, "--port", str(second_port), *FAST)
        code = second.proc.wait(60)
        second.stop()  # already exited: this only collects its output
        assert code == 1, second.output
        assert second.lines == [
            f"Error: another demo is running in {directory} (pid {first.proc.pid}, "
            f"dashboard {dashboard}): stop it first (Ctrl-C in its terminal) or give this "
            "one another --dir"
        ]
        # The running demo's database was neither deleted nor replaced.
        assert first.proc.poll() is None
        assert database.stat().st_ino == before.st_ino
    except BaseException:
        print(first.output)
        first.kill()
        raise

    # SIGKILL leaves no clean-up behind: the kernel dropped the lock with the process.
    first.kill()
    third = DemoProcess(tmp_path, "--port", str(free_port()), *FAST)
    try:
        assert third.printed("Dashboard:").startswith("http://127.0.0.1:")
    except BaseException:
        print(third.output)
        third.kill()
        raise
    assert third.stop(signal.SIGINT) == 0, third.output


def test_the_lock_names_its_holder_and_is_free_once_released(tmp_path: Path) -> None:
    held = DirectoryLock(tmp_path)
    held.acquire("pid 1, dashboard http://127.0.0.1:8000/")
    try:
        # flock locks open files, not processes: a second open in this process conflicts too.
        with pytest.raises(DirectoryBusy, match=r"\(pid 1, dashboard http://127\.0\.0\.1:8000/\)"):
            DirectoryLock(tmp_path).acquire("pid 2, dashboard http://127.0.0.1:8002/")
    finally:
        held.release()
    again = DirectoryLock(tmp_path)
    again.acquire("pid 2, dashboard http://127.0.0.1:8002/")
    again.release()
