"""Guide: a Flask app with Flask-SQLAlchemy enqueues through `db.session`.

    @app.post("/signups")
    def create_signup():
        user = User(email=request.form["email"])
        db.session.add(user)
        db.session.flush()                    # the user's id
        enqueue(db.session, "email.send",
                {"to_user_id": user.id, "template": "welcome"},
                idempotency_key=f"welcome_email:user:{user.id}")
        db.session.commit()                   # user and job together
        return {"id": user.id}, 201

If the view fails before the commit, Flask-SQLAlchemy's session is rolled back at the
end of the request (or explicitly, as below) and the job disappears with the user.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask, request
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.orm import DeclarativeBase, Mapped

from jobdesk import enqueue
from tests.integration.appdb import app_tables, claim_all, jobs_with_key, signup_count, signups


def make_app(database_url: str) -> tuple[Flask, SQLAlchemy]:
    class Base(DeclarativeBase):
        pass

    db = SQLAlchemy(model_class=Base)

    class User(db.Model):  # type: ignore[name-defined,misc]
        __table__ = signups
        id: Mapped[int]
        email: Mapped[str]

    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = database_url
    db.init_app(app)

    @app.post("/signups")
    def create_signup() -> Any:
        user = User(email=request.form["email"])
        db.session.add(user)
        db.session.flush()
        job_id = enqueue(
            db.session,
            "email.send",
            {"to_user_id": user.id, "template": "welcome"},
            idempotency_key=f"welcome_email:user:{user.id}",
        )
        if request.form.get("fail"):
            db.session.rollback()
            return {"error": "something after the enqueue failed"}, 500
        db.session.commit()
        return {"id": user.id, "job_id": job_id}, 201

    return app, db


@pytest.fixture
def flask_app(db_url: str, engine: sa.Engine) -> Iterator[tuple[Flask, SQLAlchemy]]:
    with app_tables(engine):
        app, db = make_app(db_url)
        yield app, db
        with app.app_context():
            db.engine.dispose()


def test_signup_commits_user_and_job_together(
    flask_app: tuple[Flask, SQLAlchemy], engine: sa.Engine
) -> None:
    app, _db = flask_app
    answer = app.test_client().post("/signups", data={"email": "ana@example.com"})
    assert answer.status_code == 201
    body = answer.get_json()
    assert signup_count(engine) == 1
    assert jobs_with_key(engine, f"welcome_email:user:{body['id']}") == [body["job_id"]]
    assert claim_all(engine) == [body["job_id"]]


def test_failed_request_leaves_neither_user_nor_job(
    flask_app: tuple[Flask, SQLAlchemy], engine: sa.Engine
) -> None:
    app, _db = flask_app
    answer = app.test_client().post("/signups", data={"email": "ben@example.com", "fail": "1"})
    assert answer.status_code == 500
    assert signup_count(engine) == 0
    assert claim_all(engine) == []
