"""The suite's databases through SQLAlchemy's async drivers, for the asyncio API's tests.

Import `driver_fixture` and `backend_fixture` (the fixtures `driver` and `backend`) into
a test module to run its tests once per async driver (asyncpg and psycopg on PostgreSQL,
aiosqlite on SQLite); `db_url` then gives the matching database. `run_then_dispose` runs
a scenario on one event loop — the app's, as in production — and closes the engine's
pooled connections, which belong to it; `on_one_loop` runs one on a fresh loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from jobdesk.worker.loop_resources import close_loop_resources

T = TypeVar("T")

#: Async driver → the suite backend whose database it reaches.
ASYNC_DRIVERS = {"asyncpg": "postgresql", "psycopg": "postgresql", "aiosqlite": "sqlite"}


@pytest.fixture(name="driver", params=list(ASYNC_DRIVERS))
def driver_fixture(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    pytest.importorskip(name)
    return name


@pytest.fixture(name="backend")
def backend_fixture(driver: str) -> str:
    return ASYNC_DRIVERS[driver]


def async_url(sync_url: str, driver: str) -> str:
    """`sync_url` through the async `driver`."""
    url = sa.make_url(sync_url)
    return url.set(drivername=f"{url.get_backend_name()}+{driver}").render_as_string(
        hide_password=False
    )


def run_then_dispose(engine: AsyncEngine, scenario: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        try:
            return await scenario()
        finally:
            await engine.dispose()

    return anyio.run(main)


def on_one_loop(scenario: Callable[[], Awaitable[T]]) -> T:
    """`scenario` on a fresh event loop, closing what it opened on the loop (the webhook
    HTTP clients) before the loop closes, as the worker's loop does."""

    async def main() -> T:
        try:
            return await scenario()
        finally:
            await close_loop_resources()

    return anyio.run(main)
