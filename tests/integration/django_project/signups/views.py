"""The guide's view, as `docs/django.md` shows it."""

from __future__ import annotations

from django.db import transaction

from jobdesk.contrib.django import enqueue
from tests.integration.django_project.signups.models import Signup


def sign_up(email: str, *, fail_after_enqueue: bool = False) -> tuple[int, int]:
    with transaction.atomic():
        signup = Signup.objects.create(email=email)
        job_id = enqueue(
            "email.send",
            {"to": email, "template": "welcome", "signup_id": signup.pk},
            idempotency_key=f"welcome_email:signup:{signup.pk}",
        )
        if fail_after_enqueue:
            raise RuntimeError("the plan's seat limit is reached")
    return signup.pk, job_id
