"""Failpoints: let a test kill this worker at a risky moment (tests only).

The torture suite (`tests/chaos`) needs crashes exactly where they hurt: right after a
claim committed, after a handler's effect but before its completion is written, in the
middle of the completion transaction. The worker calls `hit(name)` at those places; it
does nothing unless the process was started with `JOBDESK_TEST_FAILPOINTS`, e.g.::

    JOBDESK_TEST_FAILPOINTS=after_claim:0.05,after_effect:0.05,mid_completion:#12

`name:P` fires with probability P on each hit; `name:#N` fires on the N-th hit. Firing
writes one line to stderr (`failpoint <name> fired`) and sends SIGKILL to this process —
no cleanup, no flushing, exactly like a power cut or the OOM killer. `name:stop:#N` (or
`name:stop:P`) sends SIGSTOP instead: the process freezes right there, every thread with
it, holding whatever it held — a VM paused or a process stopped mid-transaction — until
someone sends SIGCONT (or SIGKILL).

Without the variable, `hit` is a module-level no-op function: one call, no lookup.
"""

from __future__ import annotations

import os
import random
import signal
import threading
from collections.abc import Callable
from typing import NamedTuple

ENV = "JOBDESK_TEST_FAILPOINTS"

#: The places the worker calls `hit()` from.
AFTER_CLAIM = "after_claim"
"""The claim transaction committed; the jobs are not handed to slots yet."""
BEFORE_RECORD = "before_record"
"""An external effect happened (`ctx.record_effect`/`ctx.once`); not recorded yet."""
AFTER_EFFECT = "after_effect"
"""The handler returned; its outcome is not written yet."""
MID_COMPLETION = "mid_completion"
"""Inside the completer's transaction, before COMMIT."""
IN_RENEW = "in_renew"
"""Inside the heartbeat's transaction, the leases renewed (their rows locked), before
COMMIT."""
NAMES = frozenset({AFTER_CLAIM, BEFORE_RECORD, AFTER_EFFECT, MID_COMPLETION, IN_RENEW})
STOP = "stop:"


class FailpointSpecError(ValueError):
    """`JOBDESK_TEST_FAILPOINTS` cannot be parsed; the message names the bad part."""


class Point(NamedTuple):
    probability: float
    nth: int
    """Fire on this hit (1-based); 0: by `probability` on each hit."""
    signal: int = signal.SIGKILL


def parse(spec: str) -> dict[str, Point]:
    """`"a:0.1,b:#3,c:stop:#1"` → {name: Point(probability, nth hit or 0, signal)}."""
    points: dict[str, Point] = {}
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        name, sep, raw = part.partition(":")
        if name not in NAMES:
            raise FailpointSpecError(
                f"{ENV}: unknown failpoint {name!r}; known: {', '.join(sorted(NAMES))}"
            )
        if not sep:
            raise FailpointSpecError(f"{ENV}: {part!r}: expected {name}:P or {name}:#N")
        sig = signal.SIGKILL
        if raw.startswith(STOP):
            raw, sig = raw[len(STOP) :], signal.SIGSTOP
        try:
            if raw.startswith("#"):
                nth = int(raw[1:])
                if nth < 1:
                    raise ValueError
                points[name] = Point(0.0, nth, sig)
            else:
                probability = float(raw)
                if not 0.0 <= probability <= 1.0:
                    raise ValueError
                points[name] = Point(probability, 0, sig)
        except ValueError:
            raise FailpointSpecError(
                f"{ENV}: {part!r}: expected a probability 0..1 or #N (N >= 1)"
            ) from None
    return points


class _Armed:
    def __init__(self, points: dict[str, Point]) -> None:
        self._points = points
        self._hits: dict[str, int] = dict.fromkeys(points, 0)
        self._lock = threading.Lock()
        self._rng = random.Random()

    def hit(self, name: str) -> None:
        point = self._points.get(name)
        if point is None:
            return
        with self._lock:
            self._hits[name] += 1
            hits = self._hits[name]
            fire = hits == point.nth if point.nth else self._rng.random() < point.probability
        if fire:
            os.write(2, f"failpoint {name} fired in pid {os.getpid()}\n".encode())
            # To this thread, not the process: a process-directed signal may be taken by
            # another thread, and on a busy host the caller ran on for a moment (long
            # enough to COMMIT the very transaction it was meant to freeze inside). A
            # thread-directed SIGSTOP or SIGKILL still stops or ends the whole process,
            # and this thread takes it before it returns to Python.
            signal.pthread_kill(threading.get_ident(), point.signal)


def _noop(name: str) -> None:
    return None


def _from_env() -> Callable[[str], None]:
    spec = os.environ.get(ENV, "")
    return _Armed(parse(spec)).hit if spec.strip() else _noop


#: Call as `failpoints.hit(name)` (looked up at call time; a no-op unless armed).
hit: Callable[[str], None] = _from_env()
