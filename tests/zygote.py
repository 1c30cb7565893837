"""A process that has imported Jobdesk once and forks the `jobdesk` commands tests start.

A `jobdesk worker` started with `subprocess.Popen` spends about half a second of CPU
importing SQLAlchemy, psycopg, click, APScheduler and Jobdesk before it does anything;
the long tests start a few hundred of them on a two-core machine. The zygote imports
them once per test process and forks a child per command instead, which then runs
exactly what the console script runs (`jobdesk.cli.main` with the command's argv,
environment and working directory, its output on the file the test passed) and exits
the way a Python process exits (non-daemon threads joined, `atexit` run). What a module
reads from the environment at import time is read again in the child (the failpoints).

`spawn()` returns a `ForkedProcess`, the part of `subprocess.Popen` the worker tests
use (`pid`, `poll`, `wait`, `send_signal`, `terminate`, `kill`, `returncode`): the child
is the zygote's child, so its exit status comes back over the request's socket.

Not used — the caller falls back to `Popen` — when the command has a prefix (faketime,
`opentelemetry-instrument`: they need a real exec) or under coverage (a forked child
would write the zygote's coverage file).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: Imported by the zygote before it forks anything: what every worker start imports.
PRELOAD = (
    "jobdesk.cli",
    "jobdesk.cli.run",
    "jobdesk.worker.runner",
    "jobdesk.worker.maintenance.scheduler",
    "jobdesk.shared.migrate",
    "sqlalchemy.dialects.postgresql.psycopg",
    "sqlalchemy.dialects.sqlite",
    "psycopg",
    "psycopg_pool",
    "apscheduler.schedulers.background",
    "jinja2",
    "h11",
    "prometheus_client",
)
_STATUS = struct.Struct("!i")
_LENGTH = struct.Struct("!I")


# --- the zygote ----------------------------------------------------------------------


def _preload() -> None:
    import importlib

    for name in PRELOAD:
        # An optional extra that is not installed: the child imports what it needs.
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
    while len(data) < _LENGTH.size:
        data += conn.recv(1 << 16)
    (length,) = _LENGTH.unpack_from(data)
    while len(data) < _LENGTH.size + length:
        more = conn.recv(1 << 16)
        if not more:
            raise ConnectionError("request cut short")
        data += more
    return json.loads(data[_LENGTH.size : _LENGTH.size + length]), list(fds)


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _child(request: dict[str, Any], fds: list[int], close: list[socket.socket]) -> None:
    """Runs in the forked child: become the command, never return."""
    code = 1
    try:
        for sock in close:
            sock.close()
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = list(request["argv"])
        sys.path[0] = str(Path(sys.executable).parent)  # as the console script's
        # What a fresh process reads from its environment at import time.
        failpoints = sys.modules.get("jobdesk.worker.failpoints")
        if failpoints is not None:
            failpoints.hit = failpoints._from_env()
        from jobdesk.cli import main

        try:
            main()
            code = 0
        except SystemExit as exc:
            code = _exit_code(exc)
        except KeyboardInterrupt:
            code = -signal.SIGINT
            traceback.print_exc()
        except BaseException:
            traceback.print_exc()
        # What the interpreter does on its way out: wait for non-daemon threads, then
        # the exit hooks (logging flushes its handlers there).
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        if code < 0:
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        os._exit(code & 0xFF)


def serve(path: str, parent: int) -> None:
    """Accept spawn requests on the UNIX socket `path` until the test process is gone."""
    _preload()
    # What a worker does at start (`worker.runner._tune_gc`: a full collection, then
    # everything alive is frozen), done once here: each forked worker's own collection then
    # walks only what it made since the fork, not the ~117k preloaded objects — whose pages
    # it would also copy (measured in a forked child: 65 to 70 ms of CPU, then 0.0 ms).
    gc.collect()
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    children: dict[int, socket.socket] = {}
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C is for the test process
    # A child's exit wakes the loop (SIGCHLD through the wakeup pipe); the timeout only
    # notices a test process that is gone.
    woken, wake = os.pipe()
    os.set_blocking(woken, False)
    os.set_blocking(wake, False)
    signal.set_wakeup_fd(wake)
    signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
    while os.getppid() == parent:
        ready, _, _ = select.select([listener, woken], [], [], 1.0)
        if woken in ready:
            while True:
                try:
                    if not os.read(woken, 4096):
                        break
                except BlockingIOError:
                    break
        if listener in ready:
            conn, _ = listener.accept()
            try:
                request, fds = _receive(conn)
            except (OSError, ValueError):
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:
                os.close(woken)
                os.close(wake)
                _child(request, fds, [listener, conn, *children.values()])
            for fd in fds:
                os.close(fd)
            conn.sendall(_STATUS.pack(pid))
            children[pid] = conn
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(_STATUS.pack(os.waitstatus_to_exitcode(status)))
                conn.close()


# --- the test process's side ---------------------------------------------------------


class ForkedProcess:
    """A command the zygote forked: what the tests use of `subprocess.Popen`."""

    def __init__(self, args: list[str], pid: int, conn: socket.socket) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self._conn = conn

    def _read_status(self, timeout: float | None) -> bool:
        if self.returncode is not None:
            return True
        ready, _, _ = select.select([self._conn], [], [], timeout)
        if not ready:
            return False
        data = b""
        while len(data) < _STATUS.size:
            more = self._conn.recv(_STATUS.size - len(data))
            if not more:
                raise RuntimeError(f"the zygote went away while process {self.pid} ran")
            data += more
        (self.returncode,) = _STATUS.unpack(data)
        self._conn.close()
        return True

    def poll(self) -> int | None:
        self._read_status(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._read_status(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # not reaped yet: the pid is still this process's
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The zygote of this test process, started on first use."""

    _lock = threading.Lock()
    _instance: Zygote | None = None

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="jobdesk-zygote-")
        self.path = os.path.join(self._dir, "socket")
        # No coverage in the zygote: its children would all write its data file.
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("JOBDESK_", "COV_CORE_", "COVERAGE_"))
        }
        serve = f"import tests.zygote as z; z.serve({self.path!r}, {os.getpid()})"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", serve],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        atexit.register(self.close)

    @classmethod
    def get(cls) -> Zygote:
        with cls._lock:
            if cls._instance is None or cls._instance.proc.poll() is not None:
                cls._instance = cls()
            return cls._instance

    def _connect(self, timeout: float = 30.0) -> socket.socket:
        deadline = time.monotonic() + timeout
        while True:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                conn.connect(self.path)
                return conn
            except (FileNotFoundError, ConnectionRefusedError):
                conn.close()
                if self.proc.poll() is not None:
                    raise RuntimeError("the zygote exited") from None
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def spawn(
        self,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: Path | str,
        stdout: int,
        stderr: int | None = None,
    ) -> ForkedProcess:
        """Fork `argv` (a `jobdesk` command line) with its stdout on the file descriptor
        `stdout` and its stderr on `stderr` (default: the same)."""
        payload = json.dumps({"argv": argv, "env": env, "cwd": str(cwd)}).encode()
        conn = self._connect()
        stdin = os.open(os.devnull, os.O_RDONLY)
        try:
            message = _LENGTH.pack(len(payload)) + payload
            socket.send_fds(conn, [message], [stdin, stdout, stdout if stderr is None else stderr])
        finally:
            os.close(stdin)
        data = b""
        while len(data) < _STATUS.size:
            more = conn.recv(_STATUS.size - len(data))
            if not more:
                raise RuntimeError("the zygote could not fork the command")
            data += more
        (pid,) = _STATUS.unpack(data)
        return ForkedProcess(argv, pid, conn)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.rmdir(self._dir)


def run(
    argv: list[str], *, env: dict[str, str], cwd: Path | str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run(argv, capture_output=True, text=True)` for a `jobdesk` command,
    forked by the zygote when it can be."""
    if not usable(None):
        return subprocess.run(
            argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    try:
        proc = Zygote.get().spawn(
            argv, env=env, cwd=cwd or os.getcwd(), stdout=out_write, stderr=err_write
        )
    finally:
        os.close(out_write)
        os.close(err_write)
    chunks: dict[int, list[bytes]] = {out_read: [], err_read: []}
    open_fds = [out_read, err_read]
    deadline = time.monotonic() + timeout
    try:
        while open_fds:
            left = deadline - time.monotonic()
            ready, _, _ = select.select(open_fds, [], [], max(left, 0))
            if not ready:
                proc.kill()
                proc.wait(10)
                raise subprocess.TimeoutExpired(argv, timeout)
            for fd in ready:
                data = os.read(fd, 1 << 16)
                if data:
                    chunks[fd].append(data)
                else:
                    open_fds.remove(fd)
        code = proc.wait(max(deadline - time.monotonic(), 1))
    finally:
        os.close(out_read)
        os.close(err_read)
    out, err = (b"".join(chunks[fd]).decode(errors="replace") for fd in (out_read, err_read))
    return subprocess.CompletedProcess(argv, code, out, err)


def usable(prefix: list[str] | None) -> bool:
    """Whether a command can be forked by the zygote instead of started by `Popen`."""
    if prefix:
        return False
    return not any(k.startswith(("COV_CORE_", "COVERAGE_")) for k in os.environ)
