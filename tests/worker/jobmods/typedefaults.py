"""A job type whose defaults differ from the fallback in every field, for the tests of
published defaults. Only worker subprocesses import it (`--jobs …typedefaults`): the
test process enqueues `t.defaults` without knowing what it declares."""

from __future__ import annotations

from typing import Any

from jobdesk import job
from jobdesk.worker.context import JobContext


@job("t.defaults", queue="slow", priority=2, max_attempts=9, timeout=7)
def declared(payload: dict[str, Any], ctx: JobContext) -> None:
    return None
