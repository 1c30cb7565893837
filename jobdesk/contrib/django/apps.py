"""The Django app: `INSTALLED_APPS = [..., "jobdesk.contrib.django"]`."""

from __future__ import annotations

from django.apps import AppConfig


class JobdeskConfig(AppConfig):
    name = "jobdesk.contrib.django"
    label = "jobdesk"
    verbose_name = "Jobdesk"

    def ready(self) -> None:
        from jobdesk.contrib.django import checks  # noqa: F401  (registers the checks)
