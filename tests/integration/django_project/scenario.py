"""Runs the guide's view against the project's database and prints what it saw (JSON):
`python -m tests.integration.django_project.scenario`."""

from __future__ import annotations

import json
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.integration.django_project.settings")

import django

django.setup()

from django.db import connection, transaction  # noqa: E402

from jobdesk import NewJob  # noqa: E402
from jobdesk.contrib.django import enqueue, enqueue_many  # noqa: E402
from tests.integration.django_project.signups.models import Signup  # noqa: E402
from tests.integration.django_project.signups.views import sign_up  # noqa: E402


def jobs() -> list[list[object]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, job_type, idempotency_key FROM jobdesk_jobs ORDER BY id")
        return [list(row) for row in cursor.fetchall()]


def main() -> None:
    with connection.schema_editor() as editor:
        editor.create_model(Signup)
    seen: dict[str, object] = {}
    signup_id, job_id = sign_up("ana@example.com")
    seen["committed"] = {"signup": signup_id, "job": job_id, "jobs": jobs()}
    try:
        sign_up("ben@example.com", fail_after_enqueue=True)
    except RuntimeError as exc:
        seen["raised"] = str(exc)
    seen["after_rollback"] = {
        "signups": list(Signup.objects.values_list("email", flat=True)),
        "jobs": jobs(),
    }
    with transaction.atomic():
        again = enqueue(
            "email.send",
            {"to": "ana@example.com", "template": "welcome"},
            idempotency_key=f"welcome_email:signup:{signup_id}",
        )
    seen["same_key"] = again
    with transaction.atomic(using="other"):
        seen["many_on_other"] = enqueue_many(
            [NewJob("report.daily", {"day": "2026-12-03"}), {"job_type": "t.x", "payload": {}}],
            using="other",
        )
    seen["outside_atomic"] = enqueue("t.autocommit", {})
    with transaction.atomic():
        sid = transaction.savepoint()
        enqueue("t.savepoint", {})
        transaction.savepoint_rollback(sid)
    seen["final_jobs"] = jobs()
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
