"""The host app's request handler: one transaction writes the user and enqueues the job."""

import os
import sys

import sqlalchemy as sa

import shared
from jobdesk import enqueue

assert shared.OWNER == "host-app"

engine = sa.create_engine(os.environ["APP_DATABASE_URL"])
user_id = int(sys.argv[1])
with engine.begin() as conn:
    conn.execute(
        sa.text("INSERT INTO users (id, email) VALUES (:id, :email)"),
        {"id": user_id, "email": f"user{user_id}@example.com"},
    )
    conn.execute(sa.text("INSERT INTO jobs (id, title) VALUES (:id, 'plumber')"), {"id": user_id})
    job_id = enqueue(conn, "app.greet", {"user_id": user_id}, queue="app")
print(job_id)
