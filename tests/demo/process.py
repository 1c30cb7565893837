"""Drive a real `jobdesk demo` subprocess: read what it prints, poll its console, log in
to its dashboard like a browser (CSRF token from the form, same-origin `Origin`)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx

T = TypeVar("T")

JOBDESK = Path(sys.executable).with_name("jobdesk")
_TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')


def wait_for(
    what: str, probe: Callable[[], T | None], *, timeout: float, interval: float = 0.25
) -> T:
    """Poll `probe` until it returns something truthy; fail naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")


def descendants(pid: int) -> set[int]:
    """Every live descendant of `pid` (Linux /proc)."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        current = todo.pop()
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                if child not in found:
                    found.add(child)
                    todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class DemoProcess:
    def __init__(self, cwd: Path, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBDESK_")}
        env["PYTHONUNBUFFERED"] = "1"
        self.proc = subprocess.Popen(
            [str(JOBDESK), "demo", *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def printed(self, label: str, *, timeout: float = 60) -> str:
        """The value after `label` in the banner (e.g. "Password:")."""
        pattern = re.compile(rf"^\s*{re.escape(label)}\s+(\S+)")

        def find() -> str | None:
            if self.proc.poll() is not None:
                raise AssertionError(f"jobdesk demo exited early:\n{self.output}")
            for line in list(self.lines):
                match = pattern.match(line)
                if match:
                    return match.group(1)
            return None

        return wait_for(f"{label!r} in the demo output", find, timeout=timeout)

    def stop(self, sig: int = signal.SIGINT, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        finally:
            self._close()

    def _close(self) -> None:
        self._reader.join(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            for pid in descendants(self.proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.proc.kill()
            self.proc.wait()
        self._close()


class Browser:
    """A cookie-keeping HTTP client that behaves like a same-origin browser form."""

    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/")
        self.client = httpx.Client(base_url=self.base, timeout=10, follow_redirects=False)

    def close(self) -> None:
        self.client.close()

    def get(self, path: str) -> httpx.Response:
        return self.client.get(path)

    def token(self, path: str) -> str:
        page = self.get(path)
        assert page.status_code == 200, (path, page.status_code)
        match = _TOKEN.search(page.text)
        assert match, f"no csrf_token on {path}"
        return match.group(1)

    def post_form(self, path: str, form_page: str, **fields: str) -> httpx.Response:
        data = {"csrf_token": self.token(form_page), **fields}
        return self.client.post(path, data=data, headers={"Origin": self.base})

    def login(self, username: str, password: str) -> None:
        answer = self.post_form("/login", "/login", username=username, password=password)
        assert answer.status_code == 303, (answer.status_code, answer.text[:500])
