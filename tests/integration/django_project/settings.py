"""A small Django project for the Django guide's tests: `DATABASES["default"]` (and an
`"other"` alias on the same database) from `TEST_DATABASE_URL` — `sqlite:///path` or
`postgresql://user@host:port/name`."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

SECRET_KEY = "django-guide-tests-only"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "tests.integration.django_project.signups",
    "jobdesk.contrib.django",
]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"


def _database(url: str) -> dict[str, object]:
    parts = urlsplit(url)
    if parts.scheme.startswith("sqlite"):
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": parts.path[1:]}
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parts.path.lstrip("/"),
        "USER": parts.username or "",
        "PASSWORD": parts.password or "",
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
    }


DATABASES = {
    "default": _database(os.environ["TEST_DATABASE_URL"]),
    "other": _database(os.environ["TEST_DATABASE_URL"]),
}
