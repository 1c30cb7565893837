"""The watchdog's witness: a small companion process that records, when the freeze
watchdog ends a worker, why the attempts it was running ended.

A frozen worker can run no Python, so it cannot write anything when its watchdog gives
up on it (`jobdesk.worker.watchdog`), and the reaper, seeing the lease run out later,
could only say "worker lost … stopped renewing its lease" — as after a SIGKILL. The
witness is forked from the worker before its threads start (so it has the job types'
code and retry policies loaded, and shares its memory) and waits on a pipe. Every time
the watchdog arms, the worker tells it when the watchdog will give up and which
attempts are running (their lease tokens and hard-timeout deadlines). The watchdog's
exit comes `WITNESS_SECONDS` after that moment, so when the moment passes without word
from the worker, the witness rescues every job the worker holds the way the reaper
would — failed with backoff or dead, the attempt recorded `lost` — with an error naming
the watchdog and, for an attempt past its timeout, how long past it the interpreter was
held; through its own short database connection, while the frozen process is still
there. The writes are the reaper's compare-and-set on each lease token, so a job that
finished meanwhile is left alone. When that write fails — the frozen process may hold
what it needs: a row lock of a heartbeat frozen inside its transaction, or SQLite's
write lock — the witness tries once more right after the worker has exited.

Should the worker come back to life within those seconds (a freeze that ended just
then), it finds the witness's mark on the pipe and ends itself as the watchdog would
have: what was recorded stays true. When the worker exits any other way (a clean stop,
a crash, SIGKILL), the pipe closes and the witness exits without writing anything.
Without `os.fork` (Windows) there is no witness, and the reaper says "worker lost".
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import logging
import os
import select
import signal
import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from jobdesk.shared.core.retry import RetryPolicy
from jobdesk.shared.settings import Settings

log = logging.getLogger("jobdesk.worker")

#: How long after the watchdog gives up the process is ended: the witness's time to
#: connect and write.
WITNESS_SECONDS = 3.0
#: The witness's database connection and statements are bounded well inside that.
DB_TIMEOUT_SECONDS = 2.0
#: Written by the witness when it recorded outcomes; read by the worker.
ACTED = b"!"
#: Most jobs the witness rescues (a worker holds its slots plus at most 1,000 waiting).
RESCUE_LIMIT = 5000
#: A message the pipe takes whole or not at all (POSIX: at most PIPE_BUF bytes).
MESSAGE_BYTES = getattr(select, "PIPE_BUF", 512)


class RunningAttempt(NamedTuple):
    """One attempt a slot is running, as the witness needs it."""

    job_id: int
    lease_token: int
    timeout: float
    deadline: float
    """Monotonic (the clock is the host's, shared by both processes)."""


def running_report(attempts: Iterable[Any]) -> list[RunningAttempt]:
    """The running `executor.Attempt`s as the witness needs them, due first first."""
    report = [RunningAttempt(a.job.id, a.job.lease_token, a.timeout, a.deadline) for a in attempts]
    report.sort(key=lambda a: a.deadline)
    return report


def encode(act_at: float, worker_id: str, attempts: list[RunningAttempt]) -> bytes:
    """One message, cut to what the pipe takes whole (the attempts due first stay)."""
    head = {"at": act_at, "worker": worker_id}
    rows = [list(a) for a in attempts]
    while True:
        line = json.dumps({**head, "jobs": rows}, separators=(",", ":")).encode() + b"\n"
        if len(line) <= MESSAGE_BYTES or not rows:
            return line
        rows = rows[: len(rows) // 2]


class Witness:
    """The worker's side: starts the witness process and keeps it informed."""

    def __init__(
        self, database_url: str, settings: Settings, policy_for: Callable[[str], RetryPolicy]
    ) -> None:
        self.database_url = database_url
        self.settings = settings
        self.policy_for = policy_for
        self.pid: int | None = None
        self._tell_fd: int | None = None
        self._mark_fd: int | None = None
        self.acted = False

    def start(self) -> bool:
        """Fork the witness; call before the worker starts its threads. False when it
        cannot run here (no `os.fork`) or could not be started."""
        if not hasattr(os, "fork"):
            return False
        tell_read, tell_write = os.pipe()
        mark_read, mark_write = os.pipe()
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in (tell_read, tell_write, mark_read, mark_write):
                os.close(fd)
            log.warning(
                "the watchdog's witness could not be started (%s): a frozen worker's jobs "
                "will say only that their worker was lost",
                exc,
                extra={"action": "witness_not_started"},
            )
            return False
        if pid == 0:  # the witness
            code = 0
            try:
                os.close(tell_write)
                os.close(mark_read)
                code = _serve(tell_read, mark_write, self._record)
            except BaseException:
                log.exception("the watchdog's witness failed", extra={"action": "witness_failed"})
                code = 1
            finally:
                os._exit(code)
        os.close(tell_read)
        os.close(mark_write)
        os.set_blocking(tell_write, False)
        os.set_blocking(mark_read, False)
        self.pid, self._tell_fd, self._mark_fd = pid, tell_write, mark_read
        log.info(
            "the watchdog's witness runs as process %d",
            pid,
            extra={"action": "witness_started", "witness_pid": pid},
        )
        return True

    def _record(self, plan: dict[str, Any]) -> int | None:
        return record(plan, self.database_url, self.settings, self.policy_for)

    def tell(self, act_at: float, worker_id: str, attempts: list[RunningAttempt]) -> None:
        """The watchdog gives up at `act_at` (monotonic) with these attempts running."""
        fd = self._tell_fd
        if fd is None:
            return
        try:
            os.write(fd, encode(act_at, worker_id, attempts))
        except BlockingIOError:
            pass  # the witness is behind; the next re-arm, a second from now, tells again
        except OSError as exc:
            log.warning(
                "the watchdog's witness is gone (%s); a frozen worker's jobs will say only "
                "that their worker was lost",
                exc,
                extra={"action": "witness_gone"},
            )
            self.close()

    def has_acted(self) -> bool:
        """Whether the witness recorded outcomes: the watchdog gave up on this process."""
        fd = self._mark_fd
        if fd is None or self.acted:
            return self.acted
        with contextlib.suppress(OSError):  # BlockingIOError: nothing written
            self.acted = ACTED in os.read(fd, 64)
        return self.acted

    def close(self) -> None:
        """Stop: the witness reads the end of its pipe and exits without writing."""
        for fd in (self._tell_fd, self._mark_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._tell_fd = self._mark_fd = None
        pid, self.pid = self.pid, None
        if pid is not None:
            _reap(pid)


def _reap(pid: int, timeout: float = 1.0) -> None:
    """Collect the witness's exit status so it does not linger as a zombie."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done:
            return
        time.sleep(0.01)


# --- the witness process ---------------------------------------------------------------


def _serve(tell_fd: int, mark_fd: int, record: Callable[[dict[str, Any]], int | None]) -> int:
    """The witness's life: wait for word from the worker; when the watchdog's moment
    passes without any, record the running attempts' ends; exit when the pipe closes."""
    gc.freeze()  # collections must not walk (and so copy) every page shared with the worker
    for signum in (signal.SIGINT, signal.SIGTERM):
        # Ctrl-C or a service manager's stop reach the worker, which ends cleanly and
        # closes the pipe; the witness must outlive a frozen worker's last seconds.
        signal.signal(signum, signal.SIG_IGN)
    _close_inherited({tell_fd, mark_fd})
    return watch(tell_fd, mark_fd, record)


def watch(tell_fd: int, mark_fd: int, record: Callable[[dict[str, Any]], int | None]) -> int:
    """Read the worker's word from `tell_fd`; when the last word's moment passes, call
    `record` with it and write `ACTED` to `mark_fd`. Returns 0 when `tell_fd` closes.

    A record that could not be written (`record` returned None) is tried once more when
    the worker has exited: the frozen process may hold what the record needs (a row lock
    of its heartbeat's open transaction, SQLite's write lock), released with its end."""
    pending = b""
    plan: dict[str, Any] | None = None
    unwritten: dict[str, Any] | None = None
    act_at = float("inf")
    while True:
        timeout = None if act_at == float("inf") else max(0.0, act_at - time.monotonic())
        readable, _, _ = select.select([tell_fd], [], [], timeout)
        if readable:
            chunk = os.read(tell_fd, 65536)
            if not chunk:  # the worker exited
                if unwritten is not None:
                    record(unwritten)
                return 0
            pending += chunk
            *lines, pending = pending.split(b"\n")
            if lines:
                plan = json.loads(lines[-1])
                act_at = float(plan["at"])
                unwritten = None  # the worker spoke again: it is alive after all
            continue
        act_at = float("inf")
        if plan is not None and record(plan) is None:
            unwritten = plan
        with contextlib.suppress(OSError):
            os.write(mark_fd, ACTED)


def _close_inherited(keep: set[int]) -> None:
    """Close what the worker had open (database sockets, a metrics port): the witness
    must hold none of them past the worker's end."""
    try:
        open_fds: Iterable[int] = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc: the usual range (a limit can be in the billions)
        open_fds = range(3, 4096)
    for fd in open_fds:
        if fd > 2 and fd not in keep:
            with contextlib.suppress(OSError):  # the listing's own, already closed
                os.close(fd)


def _suspended(pid: int) -> bool:
    """Whether process `pid` is stopped (SIGSTOP) rather than running (Linux; elsewhere
    a frozen process and a stopped one look alike)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


def describe(
    worker_id: str,
    act_at: float,
    running: list[RunningAttempt],
    entry: RunningAttempt | None,
    suspended: bool = False,
) -> str:
    """The error of one attempt the watchdog ended: `entry` when a slot was running it;
    `suspended` when the process was stopped from outside (SIGSTOP), not frozen."""
    if suspended:
        return (
            f"worker lost: stopped by the watchdog: worker {worker_id} was suspended from "
            "outside (SIGSTOP) for longer than the watchdog allows"
        )
    stopped = f"worker lost: stopped by the watchdog: worker {worker_id} could run no Python code"
    if entry is None:
        return f"{stopped} (a handler held the interpreter, the GIL) while it held this job"
    past = act_at - entry.deadline
    if past < 0:
        return f"{stopped} (a handler held the interpreter, the GIL) while this attempt ran"
    holder = "the handler" if len(running) == 1 else "a handler (this one or another)"
    return (
        f"{stopped}: {holder} held the interpreter (the GIL) {past:.0f}s past this "
        f"attempt's {entry.timeout:g}s timeout"
    )


def record(
    plan: dict[str, Any],
    database_url: str,
    settings: Settings,
    policy_for: Callable[[str], RetryPolicy],
) -> int | None:
    """Rescue every job the worker of `plan` holds, naming the watchdog; returns how
    many (the others finished or were rescued meanwhile), None when nothing could be
    written."""
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.core.db import make_engine
    from jobdesk.shared.core.transitions import rescue_held

    worker_id = str(plan["worker"])
    act_at = float(plan["at"])
    running = [RunningAttempt(*row) for row in plan.get("jobs", [])]
    by_ref = {(a.job_id, a.lease_token): a for a in running}
    suspended = _suspended(os.getppid())

    def error_for(row: Any) -> str:
        entry = by_ref.get((row.id, row.lease_token))
        return describe(worker_id, act_at, running, entry, suspended)

    bounded = dataclasses.replace(
        settings,
        db_connect_timeout_seconds=DB_TIMEOUT_SECONDS,
        db_statement_timeout_seconds=DB_TIMEOUT_SECONDS,
    )
    engine = make_engine(
        database_url, settings=bounded, pool_size=1, application_name="jobdesk-watchdog"
    )
    try:
        with engine.begin() as conn:
            now = db_now(conn)
            rescued = rescue_held(
                conn,
                worker_id=worker_id,
                error_for=error_for,
                now=now,
                policy_for=policy_for,
                limit=RESCUE_LIMIT,
            )
    except Exception:
        log.exception(
            "the watchdog's witness could not record the jobs of worker %s (once more when "
            "the worker has exited; else the reaper will when their leases run out)",
            worker_id,
            extra={"action": "witness_write_failed", "worker_id": worker_id},
        )
        return None
    finally:
        engine.dispose()
    for job_id, status in rescued:
        log.error(
            "job %s: the watchdog stopped worker %s; the attempt is recorded lost, the job is %s",
            job_id,
            worker_id,
            status.value,
            extra={"action": "watchdog_recorded", "job_id": job_id, "status": status.value},
        )
    return len(rescued)
