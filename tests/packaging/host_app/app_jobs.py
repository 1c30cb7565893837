"""The host app's job module, loaded by `jobdesk worker --jobs app_jobs`."""

import sqlalchemy as sa

import shared
import worker
from jobdesk import PermanentError, job

assert shared.OWNER == worker.OWNER == "host-app", "Jobdesk shadowed the app's packages"


@job("app.greet", queue="app", max_attempts=3, timeout=10)
def greet(payload: dict, ctx) -> dict:
    if "user_id" not in payload:
        raise PermanentError("payload.user_id is missing")
    with ctx.engine.begin() as conn:
        done = conn.execute(
            sa.text("UPDATE users SET greeted = true WHERE id = :id"), {"id": payload["user_id"]}
        ).rowcount
    return {"greeted": done}
