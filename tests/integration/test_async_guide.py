"""Guide: FastAPI on SQLAlchemy's asyncio extension (`docs/async.md`).

The page's Python blocks are executed as written — with `DATABASE_URL` set to this
test's database through each async driver (asyncpg, psycopg async, aiosqlite) — and the
app they define is called in-process through httpx. The guide's promises: a committed
request keeps the user and the job, an exception after the enqueue keeps neither, and
the same idempotency key returns the same job id.
"""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations at
# definition time.
import re
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any, TypeVar

import httpx
import pytest
import sqlalchemy as sa
from fastapi import Depends, HTTPException
from sqlalchemy.ext.asyncio import AsyncSession

from jobdesk.shared.core.models import jobs
from tests.asyncdb import async_url, backend_fixture, driver_fixture, run_then_dispose  # noqa: F401
from tests.integration.appdb import claim_all

T = TypeVar("T")
GUIDE = Path(__file__).resolve().parents[2] / "docs" / "async.md"


def guide_code() -> str:
    """The Python blocks of the guide's part of the page (the handler examples after it
    are not part of the app)."""
    guide = GUIDE.read_text().split("## Async handlers", 1)[0]
    return "\n\n".join(re.findall(r"```python\n(.*?)```", guide, re.DOTALL))


@pytest.fixture
def guide(engine: sa.Engine, db_url: str, driver: str) -> Iterator[SimpleNamespace]:
    """The guide's module namespace, its tables created beside Jobdesk's."""
    namespace: dict[str, Any] = {
        "__name__": "guide",
        "DATABASE_URL": async_url(db_url, driver),
    }
    exec(compile(guide_code(), str(GUIDE), "exec"), namespace)
    guide = SimpleNamespace(**namespace)
    guide.Base.metadata.create_all(engine)
    try:
        yield guide
    finally:
        guide.Base.metadata.drop_all(engine)


def run(guide: SimpleNamespace, scenario: Callable[[], Awaitable[T]]) -> T:
    return run_then_dispose(guide.engine, scenario)


def post(guide: SimpleNamespace, path: str, body: dict[str, Any]) -> httpx.Response:
    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(app=guide.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            return await client.post(path, json=body)

    return run(guide, call)


def users(engine: sa.Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(sa.text("SELECT email FROM users ORDER BY id")).scalars())


def job_rows(engine: sa.Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(jobs).order_by(jobs.c.id)))


def test_a_committed_signup_keeps_the_user_and_the_job(
    guide: SimpleNamespace, engine: sa.Engine
) -> None:
    answer = post(guide, "/signups", {"email": "ana@example.com"})
    assert answer.status_code == 201, answer.text
    body = answer.json()
    assert users(engine) == ["ana@example.com"]
    (row,) = job_rows(engine)
    assert (row.id, row.job_type, row.idempotency_key) == (
        body["job_id"],
        "email.send",
        f"welcome_email:user:{body['id']}",
    )
    assert row.payload == {"to": "ana@example.com", "template": "welcome", "user_id": body["id"]}
    assert claim_all(engine) == [body["job_id"]]


def test_an_exception_after_the_enqueue_keeps_neither(
    guide: SimpleNamespace, engine: sa.Engine
) -> None:
    # The guide's endpoint, then something that fails in the same request.
    @guide.app.post("/signups-then-fail")
    async def signup_then_fail(
        body: guide.SignupIn,  # type: ignore[name-defined]
        session: Annotated[AsyncSession, Depends(guide.get_session)],
    ) -> None:
        await guide.create_signup(body, session)
        raise HTTPException(status_code=409, detail="the plan's seat limit is reached")

    answer = post(guide, "/signups-then-fail", {"email": "ben@example.com"})
    assert answer.status_code == 409
    assert users(engine) == []
    assert job_rows(engine) == []


def test_the_same_key_returns_the_same_job(guide: SimpleNamespace, engine: sa.Engine) -> None:
    async def twice() -> list[int]:
        ids = []
        for _ in range(2):
            async with guide.Session() as session, session.begin():
                ids.append(
                    await guide.enqueue_async(
                        session,
                        "email.send",
                        {"to": "cy@example.com", "template": "welcome"},
                        idempotency_key="k:1",
                    )
                )
        return ids

    first, second = run(guide, twice)
    assert first == second
    assert [row.id for row in job_rows(engine)] == [first]


def test_the_batch_and_connection_examples(guide: SimpleNamespace, engine: sa.Engine) -> None:
    async def both() -> tuple[list[int], int]:
        async with guide.Session() as session, session.begin():
            invited = await guide.invite_all(session, ["a@example.com", "b@example.com"])
        return invited, await guide.enqueue_report("2026-12-03")

    invited, report = run(guide, both)
    rows = job_rows(engine)
    assert [row.id for row in rows] == [*invited, report]
    assert [row.payload["to"] for row in rows[:2]] == ["a@example.com", "b@example.com"]
    assert (rows[2].job_type, rows[2].queue) == ("report.daily", "reports")


def test_the_handler_examples_compile() -> None:
    """They call outside services, so they are compiled, not run (the worker tests run
    the same shapes against local receivers)."""
    examples = GUIDE.read_text().split("## Async handlers", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", examples, re.DOTALL)
    assert len(blocks) == 2
    for block in blocks:
        compile(block, str(GUIDE), "exec")
