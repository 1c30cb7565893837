"""Job types of the chaos run (loaded by the workers through `JOBDESK_JOB_MODULES`).

- `chaos.effect` writes its effect into `chaos_effects` in the SAME transaction as the
  effects-ledger row, by hand (its own transaction): exactly once by construction. The
  table has no unique key on purpose — an effect applied twice shows up as two rows
  instead of an error.
- `chaos.once_db` writes the same kind of effect through `ctx.once(key, fn(conn))`:
  Jobdesk's ledger row and the effect in one transaction, exactly once.
- `chaos.once` goes through `ctx.once(key, fn())`: its effect is an "outside" write (own
  transaction) into `chaos_once`, which — like a well-behaved receiver — counts a
  repeat of the same key as a delivery, not as a second application.
- `chaos.async_effect` and `chaos.async_once` are the same two as `async def` handlers
  (the worker's event loop; `ctx.once_async` with an async outside effect), so a run
  mixes both kinds of handler under the same faults.
- `chaos.abort` ends every attempt the ways a handler should not: `SystemExit` (argparse
  does it), `KeyboardInterrupt`, or an exception whose `str()` raises. Each attempt must
  fail like any error; enqueued with two attempts, the job ends `dead`.
- Payload `"die": true` plants a dead letter (`PermanentError` before any effect).

A database error in a handler's OWN work (`chaos.effect`'s transaction, `chaos.once`'s
"outside" write) is re-raised as `HandlerDatabaseError`, so the checker can tell it from
a database error out of Jobdesk's own calls (the ledger, progress, the built-in
handlers' lookups), which must never spend an attempt.

Importing this module also gives the built-in `email.send` and `webhook.deliver` a
fast retry policy (0.2-2 s instead of minutes) so a run fits in CI; that is test
configuration of the retry delays only, the handlers are the real ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

import jobdesk.worker.jobs  # noqa: F401  (register the built-in types before adjusting them)
from jobdesk import PermanentError, job
from jobdesk.shared.core.effects import find_effect, record_effect
from jobdesk.shared.core.retry import ExponentialBackoff, RetryPolicy
from jobdesk.worker.context import JobContext
from jobdesk.worker.registry import registry
from jobdesk.worker.resilience import DB_ERRORS
from tests.chaos.tables import KEY_LIMIT, MAX_ATTEMPTS, QUEUE, chaos_effects, chaos_once

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


class HandlerDatabaseError(Exception):
    """A database error in the handler's own work (not in a Jobdesk call): the checker
    counts these apart from the attempts database trouble must never spend."""


class Unprintable(Exception):
    """An exception whose message cannot be rendered."""

    def __str__(self) -> str:
        raise RuntimeError("this exception cannot be printed")


def _pause(payload: dict[str, Any]) -> None:
    time.sleep(float(payload.get("ms", 0)) / 1000.0)
    if payload.get("die"):
        raise PermanentError("planted: this job is meant to die")


async def _pause_async(payload: dict[str, Any]) -> None:
    await asyncio.sleep(float(payload.get("ms", 0)) / 1000.0)
    if payload.get("die"):
        raise PermanentError("planted: this job is meant to die")


@job("chaos.effect", queue=QUEUE, max_attempts=MAX_ATTEMPTS, timeout=10, backoff=FAST)
def chaos_effect(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    _pause(payload)
    return _apply_effect(payload, ctx)


@job("chaos.async_effect", queue=QUEUE, max_attempts=MAX_ATTEMPTS, timeout=10, backoff=FAST)
async def chaos_async_effect(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """`chaos.effect` as an `async def`: its transaction on a thread, off the loop."""
    await _pause_async(payload)
    return await asyncio.to_thread(_apply_effect, payload, ctx)


@job(
    "chaos.keyed_effect",
    queue=QUEUE,
    max_attempts=MAX_ATTEMPTS,
    timeout=10,
    backoff=FAST,
    concurrency=KEY_LIMIT,
)
def chaos_keyed_effect(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """`chaos.effect` under a per-key limit (its jobs carry a `concurrency_key`)."""
    _pause(payload)
    return _apply_effect(payload, ctx)


def _apply_effect(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    key = f"effect:{payload['key']}"
    try:
        with _own_work(), ctx.engine.begin() as conn:
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
        _deliver(ctx, key)
        return {"attempt": ctx.attempt}

    return ctx.once(f"once:{key}", deliver)


@job("chaos.async_once", queue=QUEUE, max_attempts=MAX_ATTEMPTS, timeout=10, backoff=FAST)
async def chaos_async_once(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """`chaos.once` as an `async def`: `ctx.once_async` awaits an async outside effect."""
    await _pause_async(payload)
    key = str(payload["key"])

    async def deliver() -> dict[str, Any]:
        await asyncio.to_thread(_deliver, ctx, key)
        return {"attempt": ctx.attempt}

    return await ctx.once_async(f"once:{key}", deliver)


def _deliver(ctx: JobContext, key: str) -> None:
    with _own_work(), ctx.engine.begin() as conn:
        _upsert_delivery(conn, key)


@job("chaos.once_db", queue=QUEUE, max_attempts=MAX_ATTEMPTS, timeout=10, backoff=FAST)
def chaos_once_db(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    _pause(payload)
    key = str(payload["key"])

    def apply(conn: sa.Connection) -> dict[str, Any]:
        conn.execute(
            sa.insert(chaos_effects).values(
                key=key, job_id=ctx.job_id, attempt=ctx.attempt, worker=ctx.worker_id
            )
        )
        return {"attempt": ctx.attempt}

    return ctx.once(f"oncedb:{key}", apply)


@job("chaos.abort", queue=QUEUE, max_attempts=2, timeout=10, backoff=FAST)
def chaos_abort(payload: dict[str, Any], ctx: JobContext) -> None:
    time.sleep(float(payload.get("ms", 0)) / 1000.0)
    how = payload["how"]
    if how == "system_exit":
        raise SystemExit(2)
    if how == "keyboard_interrupt":
        raise KeyboardInterrupt
    raise Unprintable


@contextlib.contextmanager
def _own_work() -> Iterator[None]:
    try:
        yield
    except DB_ERRORS as exc:
        first = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        raise HandlerDatabaseError(f"{type(exc).__name__}: {first[0] if first else ''}") from exc


def _upsert_delivery(conn: sa.Connection, key: str) -> None:
    if conn.dialect.name == "postgresql":  # an app's own handler: its own upsert
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
