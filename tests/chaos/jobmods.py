"""Job types of the chaos run (loaded by the workers through `JOBDESK_JOB_MODULES`).

- `chaos.effect` writes its effect into `chaos_effects` in the SAME transaction as the
  effects-ledger row: exactly once by construction. The table has no unique key on
  purpose — an effect applied twice shows up as two rows instead of an error.
- `chaos.once` goes through `ctx.once()`: its effect is an "outside" write (own
  transaction) into `chaos_once`, which — like a well-behaved receiver — counts a
  repeat of the same key as a delivery, not as a second application.
- Payload `"die": true` plants a dead letter (`PermanentError` before any effect).

Importing this module also gives the built-in `email.send` and `webhook.deliver` a
fast retry policy (0.2-2 s instead of minutes) so a run fits in CI; that is test
configuration of the retry delays only, the handlers are the real ones.
"""

from __future__ import annotations

import dataclasses
import time
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

import jobdesk.worker.jobs  # noqa: F401  (register the built-in types before adjusting them)
from jobdesk import PermanentError, job
from jobdesk.shared.core.db import is_postgresql
from jobdesk.shared.core.effects import find_effect, record_effect
from jobdesk.shared.core.retry import ExponentialBackoff, RetryPolicy
from jobdesk.worker.context import JobContext
from jobdesk.worker.registry import registry
from tests.chaos.tables import MAX_ATTEMPTS, QUEUE, chaos_effects, chaos_once

FAST = ExponentialBackoff(base=timedelta(seconds=0.2), cap=timedelta(seconds=2))
for _name in ("email.send", "webhook.deliver"):
    _builtin = registry.get(_name)
    if _builtin is not None:
        registry.add(
            dataclasses.replace(
                _builtin, retry=RetryPolicy(FAST, retry_after_cap=timedelta(seconds=2))
            )
        )


class _RaceLost(Exception):
    """Another attempt recorded the same key first: roll our effect back."""


def _pause(payload: dict[str, Any]) -> None:
    time.sleep(float(payload.get("ms", 0)) / 1000.0)
    if payload.get("die"):
        raise PermanentError("planted: this job is meant to die")


@job("chaos.effect", queue=QUEUE, max_attempts=MAX_ATTEMPTS, timeout=10, backoff=FAST)
def chaos_effect(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    _pause(payload)
    key = f"effect:{payload['key']}"
    try:
        with ctx.engine.begin() as conn:
            if find_effect(conn, key) is not None:
                return {"skipped": "ledger"}
            conn.execute(
                sa.insert(chaos_effects).values(
                    key=payload["key"], job_id=ctx.job_id, attempt=ctx.attempt, worker=ctx.worker_id
                )
            )
            if not record_effect(conn, key, job_id=ctx.job_id, detail={"attempt": ctx.attempt}):
                raise _RaceLost(key)
    except _RaceLost:
        return {"skipped": "race"}
    return {"applied": ctx.attempt}


@job("chaos.once", queue=QUEUE, max_attempts=MAX_ATTEMPTS, timeout=10, backoff=FAST)
def chaos_once_job(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    _pause(payload)
    key = str(payload["key"])

    def deliver() -> dict[str, Any]:
        with ctx.engine.begin() as conn:
            _upsert_delivery(conn, key)
        return {"attempt": ctx.attempt}

    return ctx.once(f"once:{key}", deliver)


def _upsert_delivery(conn: sa.Connection, key: str) -> None:
    if is_postgresql(conn):
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert  # type: ignore[assignment]
    statement = insert(chaos_once).values(key=key, deliveries=1)
    conn.execute(
        statement.on_conflict_do_update(
            index_elements=[chaos_once.c.key],
            set_={"deliveries": chaos_once.c.deliveries + 1},
        )
    )
