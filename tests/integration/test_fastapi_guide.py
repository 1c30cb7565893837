"""Guide: FastAPI with a SQLAlchemy `Session` per request (a dependency that commits on
success and rolls back on error), enqueuing through that session::

    def get_session() -> Iterator[Session]:
        with SessionLocal() as session, session.begin():
            yield session                 # commit after the endpoint, rollback on error

    @app.post("/signups", status_code=201)
    def create_signup(body: SignupIn, session: Session = Depends(get_session)):
        session.execute(insert(users).values(email=body.email))
        enqueue(session, "email.send", {...}, idempotency_key=f"welcome_email:user:{id}")
        return {"id": id}
"""

# No `from __future__ import annotations`: FastAPI reads the endpoint's annotations at
# definition time, and `get_session` is local to make_app.
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from jobdesk import enqueue
from tests.integration.appdb import app_tables, claim_all, jobs_with_key, signup_count, signups

fastapi = pytest.importorskip("fastapi")

import anyio  # noqa: E402
import httpx  # noqa: E402
from fastapi import Depends, FastAPI, HTTPException  # noqa: E402
from pydantic import BaseModel  # noqa: E402


class SignupIn(BaseModel):
    email: str
    fail_after_enqueue: bool = False


def make_app(engine: sa.Engine) -> FastAPI:
    session_factory = sessionmaker(engine)

    def get_session() -> Iterator[Session]:
        with session_factory() as session, session.begin():
            yield session

    app = FastAPI()

    @app.post("/signups", status_code=201)
    def create_signup(
        body: SignupIn, session: Annotated[Session, Depends(get_session)]
    ) -> dict[str, Any]:
        user_id = session.execute(
            sa.insert(signups).values(email=body.email).returning(signups.c.id)
        ).scalar_one()
        job_id = enqueue(
            session,
            "email.send",
            {"to_user_id": user_id, "template": "welcome"},
            idempotency_key=f"welcome_email:user:{user_id}",
        )
        if body.fail_after_enqueue:
            raise HTTPException(status_code=409, detail="something after the enqueue failed")
        return {"id": user_id, "job_id": job_id}

    return app


class Client:
    """Calls the ASGI app in-process through httpx (no server, no starlette TestClient)."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    def post(self, path: str, json: dict[str, Any]) -> httpx.Response:
        async def call() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
                return await client.post(path, json=json)

        return anyio.run(call)


@pytest.fixture
def client(engine: sa.Engine) -> Iterator[Client]:
    with app_tables(engine):
        yield Client(make_app(engine))


def test_signup_commits_user_and_job(client: Client, engine: sa.Engine) -> None:
    answer = client.post("/signups", json={"email": "ana@example.com"})
    assert answer.status_code == 201, answer.text
    body = answer.json()
    assert signup_count(engine) == 1
    assert jobs_with_key(engine, f"welcome_email:user:{body['id']}") == [body["job_id"]]
    assert claim_all(engine) == [body["job_id"]]


def test_error_after_enqueue_rolls_both_back(client: Client, engine: sa.Engine) -> None:
    answer = client.post("/signups", json={"email": "ben@example.com", "fail_after_enqueue": True})
    assert answer.status_code == 409
    assert signup_count(engine) == 0
    assert claim_all(engine) == []
