"""Settings of the built-in job types, read from `JOBDESK_*` variables at each run.

The core `Settings` dataclass holds what every process needs; the built-in types read
their own variables from `Settings.extra` here, parsed just as strictly (a bad value
fails the job with a message naming the variable). Reading per run keeps a long-lived
worker in step with its environment in tests and costs microseconds.

| variable | default | meaning |
|---|---|---|
| `JOBDESK_SMTP_URL` | `smtp://127.0.0.1:25` | SMTP server (core setting) |
| `JOBDESK_MAIL_FROM` | `jobdesk@localhost` | sender address (core setting) |
| `JOBDESK_SMTP_TIMEOUT_SECONDS` | 10 | socket timeout of every SMTP step |
| `JOBDESK_SMTP_RATE_LIMIT` | `10/s` | mails per period, all workers together |
| `JOBDESK_EMAIL_TEMPLATES_DIR` | built-in `templates/email` | Jinja email templates |
| `JOBDESK_WEBHOOK_CONNECT_TIMEOUT_SECONDS` | 5 | TCP/TLS connect timeout |
| `JOBDESK_WEBHOOK_TIMEOUT_SECONDS` | 10 | read/write timeout and total request deadline |
| `JOBDESK_WEBHOOK_RATE_LIMIT` | `20/s` | requests per period per endpoint |
| `JOBDESK_WEBHOOK_RETRY_AFTER_CAP_SECONDS` | 3600 | longest `Retry-After` honoured |
| `JOBDESK_PAUSED_RECHECK_SECONDS` | 60 | how often a held job re-checks a paused endpoint |
| `JOBDESK_BREAKER_THRESHOLD` | 5 | consecutive failures that open a breaker |
| `JOBDESK_BREAKER_COOLDOWN_SECONDS` | 30 | first open period (doubles per failed probe) |
| `JOBDESK_REPORTS_DIR` | `./reports` | where finished report files are written |
| `JOBDESK_REPORT_CHUNK_ROWS` | 5000 | source rows per `report.chunk` job |
| `JOBDESK_REPORT_RETENTION_DAYS` | 30 | when a finished report's run and file expire |
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from jobdesk.shared.assets import asset_path
from jobdesk.shared.settings import Settings, SettingsError, parse_int, parse_seconds
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
    webhook_rate: str
    webhook_retry_after_cap_seconds: float
    paused_recheck_seconds: float
    breaker_threshold: int
    breaker_cooldown_seconds: float
    allow_private_webhook_targets: bool
    reports_dir: Path
    report_chunk_rows: int
    report_retention_days: int

    def webhook_rate_limit(self, endpoint: str) -> RateLimit:
        return _rate(f"webhook:{endpoint}", "JOBDESK_WEBHOOK_RATE_LIMIT", self.webhook_rate)


def _rate(key: str, variable: str, spec: str) -> RateLimit:
    try:
        limit = RateLimit.parse(key, spec)
    except ValueError as exc:
        raise SettingsError(f"{variable}: {exc}") from None
    if limit.rate <= 0:
        raise SettingsError(f"{variable}: the rate must be > 0")
    return limit


def _seconds(extra: dict[str, str], name: str, default: float, minimum: float = 0.0) -> float:
    raw = extra.get(name)
    if raw is None:
        return default
    value = parse_seconds(f"JOBDESK_{name.upper()}", raw)
    if value < minimum:
        raise SettingsError(f"JOBDESK_{name.upper()}: must be >= {minimum:g}")
    return value


def _templates_dir(raw: str | None) -> Path:
    if raw:
        return Path(raw)
    return BUILTIN_TEMPLATES


def jobs_config(settings: Settings | None = None) -> JobsConfig:
    """The built-in types' configuration from `settings` (default: the environment)."""
    settings = settings or Settings.from_env()
    extra = dict(settings.extra)
    rows = extra.get("report_chunk_rows")
    webhook_rate = extra.get("webhook_rate_limit", "20/s")
    _rate("webhook:check", "JOBDESK_WEBHOOK_RATE_LIMIT", webhook_rate)
    return JobsConfig(
        smtp_url=settings.smtp_url,
        mail_from=settings.mail_from,
        smtp_timeout_seconds=_seconds(extra, "smtp_timeout_seconds", 10.0, 0.05),
        smtp_rate_limit=_rate(
            "smtp:default", "JOBDESK_SMTP_RATE_LIMIT", extra.get("smtp_rate_limit", "10/s")
        ),
        email_templates_dir=_templates_dir(extra.get("email_templates_dir")),
        webhook_connect_timeout_seconds=_seconds(
            extra, "webhook_connect_timeout_seconds", 5.0, 0.05
        ),
        webhook_timeout_seconds=_seconds(extra, "webhook_timeout_seconds", 10.0, 0.05),
        webhook_rate=webhook_rate,
        webhook_retry_after_cap_seconds=_seconds(extra, "webhook_retry_after_cap_seconds", 3600.0),
        paused_recheck_seconds=_seconds(extra, "paused_recheck_seconds", 60.0, 0.01),
        breaker_threshold=parse_int(
            "JOBDESK_BREAKER_THRESHOLD", extra.get("breaker_threshold", "5"), 1
        ),
        breaker_cooldown_seconds=_seconds(extra, "breaker_cooldown_seconds", 30.0, 0.01),
        allow_private_webhook_targets=settings.allow_private_webhook_targets,
        reports_dir=Path(extra.get("reports_dir") or "reports"),
        report_chunk_rows=parse_int("JOBDESK_REPORT_CHUNK_ROWS", rows or "5000", 1),
        report_retention_days=parse_int(
            "JOBDESK_REPORT_RETENTION_DAYS", extra.get("report_retention_days", "30"), 1
        ),
    )
