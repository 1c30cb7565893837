"""A job type that reads its secret (`--jobs tests.worker.jobmods.secretive`): it ends
dead when `ctx.secrets["token"]` is not the value its payload expects."""

from __future__ import annotations

from typing import Any

from jobdesk import PermanentError, job
from jobdesk.worker.context import JobContext


@job("t.secret_check", queue="secrets", max_attempts=3)
def check(payload: dict[str, Any], ctx: JobContext) -> None:
    if ctx.secrets.get("token") != payload["expect"]:
        raise PermanentError("the secret did not open to what the payload expects")
