"""`enqueue_async` and `enqueue_many_async`: enqueue from asyncio code (FastAPI,
Starlette, Litestar…) on SQLAlchemy's asyncio extension.

Pass the `AsyncSession` or `AsyncConnection` the app is already writing with: the job
commits or rolls back with the app's own rows, exactly as `enqueue` does with a sync
`Session`. The work is the sync functions' own, run through SQLAlchemy's `run_sync` on
the caller's connection (the async driver underneath: asyncpg, psycopg's async mode or
aiosqlite), so options, validation, idempotency, errors and SQL are the same by
construction and the event loop is never blocked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, Unpack

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_scoped_session
from sqlalchemy.orm import Session, scoped_session

from jobdesk.shared.core.enqueue import EnqueueOptions, NewJob, enqueue, enqueue_many

__all__ = ["enqueue_async", "enqueue_many_async"]

T = TypeVar("T")
AsyncBind = AsyncSession | AsyncConnection | async_scoped_session[AsyncSession]


async def enqueue_async(
    bind: AsyncBind,
    job_type: str,
    payload: Mapping[str, Any],
    **options: Unpack[EnqueueOptions],
) -> int:
    """`enqueue` for an `AsyncSession` / `AsyncConnection`: one job in the caller's
    transaction, its id returned; the same options (`queue`, `priority`, `run_at`,
    `max_attempts`, `idempotency_key`, `group_key`, `timeout`, `secrets`) and the same
    errors."""

    def write(sync_bind: sa.Connection) -> int:
        return enqueue(sync_bind, job_type, payload, **options)

    return await _run(bind, "enqueue", write)


async def enqueue_many_async(
    bind: AsyncBind,
    new_jobs: Iterable[NewJob | Mapping[str, Any]],
    *,
    max_payload_bytes: int | None = None,
) -> list[int]:
    """`enqueue_many` for an `AsyncSession` / `AsyncConnection`: ids in input order."""
    batch = list(new_jobs)  # an async caller's generator must not run in the sync part

    def write(sync_bind: sa.Connection) -> list[int]:
        return enqueue_many(sync_bind, batch, max_payload_bytes=max_payload_bytes)

    return await _run(bind, "enqueue_many", write)


async def _run(bind: object, sync_name: str, write: Callable[[sa.Connection], T]) -> T:
    """Run `write(connection)` on the caller's transaction through `run_sync`."""
    if isinstance(bind, async_scoped_session):
        bind = bind()  # this scope's AsyncSession
    if isinstance(bind, AsyncSession):
        # The session's connection: `run_sync` hands over the sync Session, whose
        # `connection()` joins (or begins) the session's transaction.
        return await bind.run_sync(lambda session: write(session.connection()))
    if isinstance(bind, AsyncConnection):
        return await bind.run_sync(write)
    if isinstance(bind, AsyncEngine):
        raise TypeError(
            f"{sync_name}_async needs an AsyncConnection or AsyncSession so the job joins "
            f"your transaction; use `async with engine.begin() as conn: await "
            f"{sync_name}_async(conn, ...)`"
        )
    if isinstance(bind, sa.Connection | Session | scoped_session):
        raise TypeError(
            f"{sync_name}_async needs an AsyncSession or AsyncConnection, got the sync "
            f"{type(bind).__name__}; call `{sync_name}(...)` (no await) with it"
        )
    raise TypeError(
        f"{sync_name}_async needs a SQLAlchemy AsyncSession or AsyncConnection, "
        f"got {type(bind).__name__}"
    )
