"""The built-in job types' configuration, taken from the worker's `Settings`.

Every variable is declared (type, default, meaning) in `jobdesk.shared.settings.model`
under the Email, Webhooks and Reports groups; this module only shapes them for the
handlers (rate limits with their keys, the template folder). A handler gets the
configuration of the settings its worker runs with (`ctx.settings`), computed once.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from jobdesk.shared.assets import asset_path
from jobdesk.shared.settings import Rate, Settings
from jobdesk.worker.registry import RateLimit

BUILTIN_TEMPLATES = asset_path("templates", "email")


@dataclass(frozen=True)
class JobsConfig:
    smtp_url: str
    mail_from: str
    smtp_timeout_seconds: float
    smtp_rate_limit: RateLimit
    email_templates_dir: Path
    webhook_connect_timeout_seconds: float
    webhook_timeout_seconds: float
    webhook_rate: Rate
    webhook_retry_after_cap_seconds: float
    paused_recheck_seconds: float
    breaker_threshold: int
    breaker_cooldown_seconds: float
    allow_private_webhook_targets: bool
    reports_dir: Path
    report_chunk_rows: int
    report_retention_days: int

    def webhook_rate_limit(self, endpoint: str) -> RateLimit:
        return RateLimit.of(f"webhook:{endpoint}", self.webhook_rate)


@functools.lru_cache(maxsize=8)
def jobs_config(settings: Settings) -> JobsConfig:
    """The built-in types' configuration for `settings` (cached: settings are frozen)."""
    return JobsConfig(
        smtp_url=settings.smtp_url,
        mail_from=settings.mail_from,
        smtp_timeout_seconds=settings.smtp_timeout_seconds,
        smtp_rate_limit=RateLimit.of("smtp:default", settings.smtp_rate_limit),
        email_templates_dir=settings.email_templates_dir or BUILTIN_TEMPLATES,
        webhook_connect_timeout_seconds=settings.webhook_connect_timeout_seconds,
        webhook_timeout_seconds=settings.webhook_timeout_seconds,
        webhook_rate=settings.webhook_rate_limit,
        webhook_retry_after_cap_seconds=settings.webhook_retry_after_cap_seconds,
        paused_recheck_seconds=settings.paused_recheck_seconds,
        breaker_threshold=settings.breaker_threshold,
        breaker_cooldown_seconds=settings.breaker_cooldown_seconds,
        allow_private_webhook_targets=settings.allow_private_webhook_targets,
        reports_dir=settings.reports_dir,
        report_chunk_rows=settings.report_chunk_rows,
        report_retention_days=settings.report_retention_days,
    )
