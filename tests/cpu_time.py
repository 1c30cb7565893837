"""CPU time of the calling thread spent in a piece of code, without the coverage tracer.

The linear-time bounds (a masking rule that backtracks takes tens of seconds, a linear one
tenths) are about the code. Under `--cov` every Python line also runs the tracer, which
multiplies the time of line-heavy code three- to eight-fold on a slow machine: the bound
would then measure the tracer. The thread's trace function (coverage's, or several under
pytest-xdist) is set aside for the measured block only; the same code is covered by the
other tests.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def untraced_cpu_seconds() -> Iterator[list[float]]:
    """`with untraced_cpu_seconds() as spent:` … then `spent[0]` is the block's CPU time."""
    tracer = sys.gettrace()
    sys.settrace(None)
    spent: list[float] = []
    started = time.thread_time()
    try:
        yield spent
    finally:
        spent.append(time.thread_time() - started)
        sys.settrace(tracer)
