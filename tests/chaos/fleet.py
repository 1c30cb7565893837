"""The `jobdesk worker` subprocesses of a chaos run, and the faults aimed at them.

Each slot runs one real worker process (the console script, same as production) with
its output appended to `worker-<n>.log`. The driver kills, stops, resumes and restarts
slots; `reap()` notices every exit and sorts it: a kill the driver sent, a failpoint
crash (the process wrote `failpoint <name> fired` and SIGKILLed itself), a worker that
stopped itself (exit 3: stuck handler threads — a supervisor restarts it), a graceful
stop, or an unexpected exit — which fails the run (D1: no worker exits for good).
Dead slots are restarted by the driver, like a process supervisor would.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from jobdesk.worker.failpoints import ENV as FAILPOINTS_ENV

_FIRED = re.compile(r"failpoint (\w+) fired")


def _command() -> list[str]:
    script = Path(sys.executable).with_name("jobdesk")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from jobdesk.cli import main; main()"]


@dataclass
class Slot:
    index: int
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    offset: int = 0
    armed: str | None = None
    expected: str | None = None  # "kill" or "term" when the driver ended it
    stopped: bool = False
    starts: int = 0
    started_at: float = 0.0  # time.monotonic() of the last start
    pids: list[int] = field(default_factory=list)  # every process this slot ran


@dataclass
class Fleet:
    env: dict[str, str]
    workdir: Path
    size: int
    concurrency: int
    cwd: Path
    #: (slot index, command, environment) -> the command and environment to run, e.g.
    #: inside a network namespace with its own database address (`tests.chaos.netlab`).
    launch: Callable[[int, list[str], dict[str, str]], tuple[list[str], dict[str, str]]] | None = (
        None
    )
    slots: list[Slot] = field(default_factory=list)
    kills: int = 0
    stops: int = 0
    graceful: int = 0
    failpoints: Counter[str] = field(default_factory=Counter)
    self_exits: Counter[int] = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.slots = [Slot(i, self.workdir / f"worker-{i}.log") for i in range(self.size)]

    # ------------------------------------------------------------------ control
    def start(self, index: int, armed: str | None = None) -> None:
        slot = self.slots[index]
        assert slot.proc is None or slot.proc.poll() is not None, "slot still running"
        env = dict(self.env)
        env.pop(FAILPOINTS_ENV, None)
        if armed:
            env[FAILPOINTS_ENV] = armed
        command = [*_command(), "worker", "--concurrency", str(self.concurrency)]
        if self.launch is not None:
            command, env = self.launch(index, command, env)
        slot.offset = slot.log.stat().st_size if slot.log.exists() else 0
        with slot.log.open("ab") as out:
            out.write(f"--- start {slot.starts} armed={armed or '-'} ---\n".encode())
            slot.offset = out.tell()
            slot.proc = subprocess.Popen(
                command,
                cwd=self.cwd,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        slot.pids.append(slot.proc.pid)
        slot.armed, slot.expected, slot.stopped = armed, None, False
        slot.starts += 1
        slot.started_at = time.monotonic()

    def alive(self, index: int) -> bool:
        proc = self.slots[index].proc
        return proc is not None and proc.poll() is None

    def _signal(self, index: int, sig: signal.Signals) -> bool:
        proc = self.slots[index].proc
        if proc is None or proc.poll() is not None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)
            return True
        return False

    def kill(self, index: int) -> bool:
        slot = self.slots[index]
        if slot.stopped:
            self.cont(index)
        if not self._signal(index, signal.SIGKILL):
            return False
        slot.expected = "kill"
        self.kills += 1
        return True

    def stop(self, index: int) -> bool:
        if self.slots[index].stopped or not self._signal(index, signal.SIGSTOP):
            return False
        self.slots[index].stopped = True
        self.stops += 1
        return True

    def cont(self, index: int) -> None:
        if self.slots[index].stopped:
            self._signal(index, signal.SIGCONT)
            self.slots[index].stopped = False

    def terminate(self, index: int, wait: float = 30.0) -> None:
        """SIGTERM (graceful shutdown) and wait for the exit."""
        slot = self.slots[index]
        self.cont(index)
        if not self._signal(index, signal.SIGTERM):
            return
        slot.expected = "term"
        assert slot.proc is not None
        try:
            slot.proc.wait(wait)
        except subprocess.TimeoutExpired:
            slot.expected = "kill"
            self._signal(index, signal.SIGKILL)
            slot.proc.wait(10)

    # ------------------------------------------------------------------ exits
    def reap(self) -> list[tuple[int, str]]:
        """Classify every slot whose process ended since the last call."""
        events: list[tuple[int, str]] = []
        for slot in self.slots:
            proc = slot.proc
            if proc is None or proc.poll() is None:
                continue
            code = proc.returncode
            slot.proc = None
            if slot.expected == "kill":
                events.append((slot.index, "killed"))
            elif slot.expected == "term":
                self.graceful += 1
                if code == -signal.SIGKILL and (name := self._fired(slot)):
                    # Its armed crash point fired while it finished its jobs after SIGTERM.
                    self.failpoints[name] += 1
                elif code == -signal.SIGTERM and "worker_started" not in self._output(slot):
                    # Asked to stop while still importing (before its signal handlers):
                    # it had claimed nothing, so ending at once is the right answer.
                    pass
                elif code != 0:
                    self.unexpected.append(f"worker {slot.index}: exit {code} after SIGTERM")
                events.append((slot.index, "terminated"))
            elif code == -signal.SIGKILL and (name := self._fired(slot)):
                self.failpoints[name] += 1
                events.append((slot.index, f"failpoint:{name}"))
            elif code == 3:
                self.self_exits[code] += 1
                events.append((slot.index, "stuck-threads exit"))
            else:
                self.unexpected.append(
                    f"worker {slot.index}: exit {code} unasked; log tail:\n{self._tail(slot)}"
                )
                events.append((slot.index, f"unexpected exit {code}"))
        return events

    def _output(self, slot: Slot) -> str:
        with slot.log.open("rb") as log:
            log.seek(slot.offset)
            return log.read().decode(errors="replace")

    def _fired(self, slot: Slot) -> str | None:
        found = _FIRED.findall(self._output(slot))
        return found[-1] if found else None

    def _tail(self, slot: Slot, lines: int = 30) -> str:
        return "\n".join(self._output(slot).splitlines()[-lines:])

    def shutdown(self, wait: float = 20.0) -> None:
        """Stop every worker: resume the stopped, SIGTERM all, SIGKILL stragglers."""
        for slot in self.slots:
            self.cont(slot.index)
            if self._signal(slot.index, signal.SIGTERM):
                slot.expected = "term"
        deadline = time.monotonic() + wait
        for slot in self.slots:
            if slot.proc is None:
                continue
            try:
                slot.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._signal(slot.index, signal.SIGKILL)
                slot.proc.wait(10)

    def force_kill_all(self) -> None:
        for slot in self.slots:
            self.cont(slot.index)
            self._signal(slot.index, signal.SIGKILL)
            if slot.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    slot.proc.wait(5)
