"""`Settings`: every `JOBDESK_*` variable as one typed, frozen dataclass.

Every process (CLI, worker, dashboard) builds a `Settings` once at start-up with
`Settings.from_env()`; CLI options override fields with `dataclasses.replace`. Parsing
is strict: a malformed value or an unknown `JOBDESK_*` name stops start-up with one
line naming the variable (and, for a typo, the closest real name).

The README's settings reference is generated from these declarations
(`jobdesk settings --markdown`) and a test keeps the two equal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobdesk.shared.settings.alerts import AlertConfig
from jobdesk.shared.settings.parsing import (
    Rate,
    check_encryption_keys,
    check_host_names,
    check_listen_url,
    check_networks,
    check_trace_url_template,
    networks,
)
from jobdesk.shared.settings.retention import RetentionPolicy
from jobdesk.shared.settings.schema import (
    entries,
    load,
    reference_markdown,
    section,
    setting,
    unknown_name_message,
    unknown_names,
)

DEFAULT_DATABASE_URL = "sqlite:///jobdesk.db"
ROLES = ("viewer", "operator", "admin")

CORE = "Core and database"
WORKER = "Worker"
EMAIL = "Email (`email.send`)"
WEBHOOKS = "Webhooks (`webhook.deliver`; the breaker settings apply to SMTP too)"
REPORTS = "Reports (`report.generate`, `report.chunk`, `report.assemble`)"
DASHBOARD = "Dashboard"
OBSERVABILITY = "Metrics and logging"
TESTS = "Tests, benchmarks and the demo (not for production)"

#: Variables read outside the product's processes (the test suite, benchmarks, the
#: torture suite, gunicorn's config file): known, so never "unknown", but not parsed here.
KNOWN_ELSEWHERE: dict[str, str] = {
    "JOBDESK_TEST_POSTGRES_URL": "server the test suite creates its databases on "
    "(default `postgresql+psycopg://root@127.0.0.1:5432/test`)",
    "JOBDESK_CHAOS": "`ci`, `pgbouncer`, `partition`, `sqlite` or `soak`: run that "
    "torture-suite profile inside pytest",
    "JOBDESK_CHAOS_SEED": "seed of the torture suite's fault schedule in `.ci/run`",
    "JOBDESK_BENCH_POSTGRES_URL": "server the benchmarks create their databases on",
    "JOBDESK_TEST_FAILPOINTS": "crash points armed in a worker by the torture suite "
    "(never set it in production)",
    "JOBDESK_E2E_SCREENSHOT_DIR": "where the end-to-end browser tests save screenshots",
}


@dataclass(frozen=True)
class Settings:
    """Everything configurable, with production-safe defaults."""

    # --- core and database
    database_url: str = setting(
        DEFAULT_DATABASE_URL,
        "SQLite file, or `postgresql+psycopg://user@host/db`",
        group=CORE,
    )
    max_payload_bytes: int = setting(
        256 * 1024, "largest accepted payload (≥ 1024)", group=CORE, minimum=1024
    )
    db_pool_size: int = setting(
        10,
        "PostgreSQL pool size; a worker's handlers get `min(slots + 8 per slot group, this)` "
        "(the 8: each event loop's threads for its coroutines' database work)",
        group=CORE,
        minimum=1,
    )
    db_connect_timeout_seconds: float = setting(5.0, "PostgreSQL connect timeout", group=CORE)
    db_statement_timeout_seconds: float = setting(
        30.0, "PostgreSQL `statement_timeout`", group=CORE
    )
    pgbouncer: bool = setting(
        False,
        "the database URL points at PgBouncer in transaction pooling mode: no startup "
        "`options` and no server-side prepared statements; deadlines are set per "
        "transaction (`SET LOCAL`) and LISTEN needs `JOBDESK_LISTEN_URL`",
        group=CORE,
    )
    db_timeouts_from_role: bool = setting(
        False,
        "with `JOBDESK_PGBOUNCER`: the role's or database's own `statement_timeout` "
        "(`ALTER ROLE … SET statement_timeout = '30s'`) bounds every statement instead of a "
        "`SET LOCAL` per transaction — one round trip less per transaction, and the claim stays "
        "one autocommit statement; a connection whose `statement_timeout` is 0 is refused",
        group=CORE,
    )
    listen_url: str | None = setting(
        None,
        "a direct PostgreSQL URL (not through PgBouncer) for the worker's LISTEN connection",
        group=CORE,
        shown_default="the database URL; behind PgBouncer unset means workers poll",
        check=check_listen_url,
    )
    encryption_keys: str | None = setting(
        None,
        "comma-separated Fernet keys that seal job secrets (`enqueue(..., secrets=…)`): the "
        "first seals, every one opens; `jobdesk keys generate` makes one, `jobdesk keys "
        "rotate` seals everything again with the first. The worker needs the same keys",
        group=CORE,
        shown_default="— (enqueues with secrets are refused)",
        check=check_encryption_keys,
    )
    unknown_types: str = setting(
        "allow",
        "`enqueue` of a type neither registered in the process nor published by a worker: "
        "`allow` (queue `default`, priority 5, 5 attempts, a warning logged once per type) "
        "or `refuse` (a `ValidationError` naming the type)",
        group=CORE,
        choices=("allow", "refuse"),
    )

    trace_link_after_seconds: float = setting(
        3600.0,
        "with OpenTelemetry: an attempt that starts longer than this after its enqueue is "
        "linked to the enqueue's trace instead of continuing it",
        group=OBSERVABILITY,
        minimum=0,
    )
    trace_url_template: str | None = setting(
        None,
        "with OpenTelemetry: the job page links its trace, e.g. "
        "`https://tempo.example/trace/{trace_id}`",
        group=OBSERVABILITY,
        shown_default="— (no link)",
        check=check_trace_url_template,
    )

    # --- worker
    job_modules: tuple[str, ...] = setting(
        (),
        "comma-separated modules that register job types (`--jobs` replaces it)",
        group=WORKER,
    )
    queues: str | None = setting(None, "`--queues` spec", group=WORKER, shown_default="every queue")
    concurrency: int = setting(
        10, "handlers at once (1 to 1000)", group=WORKER, minimum=1, maximum=1000
    )
    async_concurrency: int = setting(
        200,
        "`async def` handlers — `webhook.deliver` among them — in flight at once per slot "
        "group, on the worker's event loop (1 to 10000)",
        group=WORKER,
        minimum=1,
        maximum=10000,
    )
    lease_seconds: float = setting(
        30.0, "claim lease (≥ 1), renewed by heartbeats", group=WORKER, minimum=1
    )
    heartbeat_seconds: float = setting(
        10.0,
        "lease renewal and worker heartbeat (at most a third of the lease)",
        group=WORKER,
        positive=True,
    )
    reaper_interval_seconds: float = setting(
        10.0, "how often expired leases are reclaimed", group=WORKER, positive=True
    )
    poll_interval_seconds: float = setting(
        1.0,
        "look for due jobs without a wake-up (SQLite; PostgreSQL fallback)",
        group=WORKER,
        positive=True,
    )
    shutdown_timeout_seconds: float = setting(
        30.0, "grace period for running jobs on SIGTERM", group=WORKER
    )
    cancel_grace_seconds: float = setting(
        10.0,
        "after an operator cancels a running job, how long its handler has to stop on "
        "`ctx.cancelled` before the worker stops it hard (the worker hears of the cancel "
        "with its next heartbeat)",
        group=WORKER,
        minimum=0,
    )
    leader_lease_seconds: float | None = setting(
        None,
        "maintenance leader's lease; a new leader takes over after it",
        group=WORKER,
        minimum=1,
        shown_default="max(lease, 3 x reaper interval)",
    )
    max_stuck_threads: int | None = setting(
        None,
        "abandoned handler threads tolerated before the worker exits 3",
        group=WORKER,
        shown_default="max(2, slots)",
    )
    watchdog_seconds: float | None = setting(
        None,
        "a worker whose Python code has not run (a handler holding the GIL) for 5 s past a "
        "running job's timeout, or for this long in all, prints every thread's stack and "
        "exits 1 so its supervisor restarts it; at least 5, or 0 to turn the watchdog off",
        group=WORKER,
        minimum=0,
        shown_default="max(60, 2 x lease)",
    )
    fleet_processes: int | None = setting(
        None,
        "worker processes in the whole fleet (hosts times processes per host): a worker refuses "
        "to start when they could open more connections than the server allows",
        group=WORKER,
        minimum=1,
        shown_default="— (only this process is checked)",
    )
    worker_prune_after_seconds: float = setting(
        3600.0, "rows of workers silent this long are removed", group=WORKER, positive=True
    )

    # --- email
    smtp_url: str = setting(
        "smtp://127.0.0.1:25",
        "`smtp://[user:pass@]host:port` (STARTTLS when offered, required off loopback; "
        "`?starttls=required\\|off`, `?timeout=S`) or `smtps://host:465`",
        group=EMAIL,
    )
    mail_from: str = setting(
        "jobdesk@localhost", "sender; its domain names the Message-IDs", group=EMAIL
    )
    smtp_timeout_seconds: float = setting(
        10.0, "timeout of every SMTP socket step", group=EMAIL, minimum=0.05
    )
    smtp_rate_limit: Rate = setting(Rate(10), "mails per period, all workers together", group=EMAIL)
    email_templates_dir: Path | None = setting(
        None,
        "your own templates (`welcome` and `password_reset` ship)",
        group=EMAIL,
        shown_default="built-in `templates/email`",
    )

    # --- webhooks
    allow_private_webhook_targets: bool = setting(
        False,
        "allow loopback/private targets (development and tests only)",
        group=WEBHOOKS,
    )
    webhook_connect_timeout_seconds: float = setting(
        5.0, "TCP + TLS connect", group=WEBHOOKS, minimum=0.05
    )
    webhook_timeout_seconds: float = setting(
        10.0, "read/write timeout and total deadline of a request", group=WEBHOOKS, minimum=0.05
    )
    webhook_rate_limit: Rate = setting(
        Rate(20), "requests per period, per endpoint, all workers together", group=WEBHOOKS
    )
    webhook_retry_after_cap_seconds: float = setting(
        3600.0, "longest `Retry-After` honoured", group=WEBHOOKS
    )
    paused_recheck_seconds: float = setting(
        60.0, "how often a held job re-checks its paused endpoint", group=WEBHOOKS, minimum=0.01
    )
    breaker_threshold: int = setting(
        5, "consecutive failures that open a breaker", group=WEBHOOKS, minimum=1
    )
    breaker_cooldown_seconds: float = setting(
        30.0, "first open period (doubles per failed probe)", group=WEBHOOKS, minimum=0.01
    )

    # --- reports
    reports_dir: Path = setting(
        Path("reports"),
        "where report files are written",
        group=REPORTS,
        shown_default="`reports` (in the working directory)",
    )
    report_chunk_rows: int = setting(5000, "source rows per chunk job", group=REPORTS, minimum=1)
    report_retention_days: int = setting(
        30, "whole days until a finished run and its file expire", group=REPORTS, minimum=1
    )

    # --- dashboard
    secret_key: str = setting(
        "",
        "signs sessions; ≥ 32 random characters, placeholders refused",
        group=DASHBOARD,
        shown_default="— (required)",
    )
    secure_cookies: bool = setting(
        False,
        "always mark the session cookie `Secure` (it is anyway over HTTPS)",
        group=DASHBOARD,
    )
    session_lifetime_seconds: float = setting(
        12 * 3600.0,
        "a login lasts at most this long, however active (absolute, checked on the server)",
        group=DASHBOARD,
        minimum=60,
    )
    session_idle_timeout_seconds: float = setting(
        3600.0,
        "a session unused this long ends (checked on the server)",
        group=DASHBOARD,
        minimum=60,
    )
    dashboard_statement_timeout_seconds: float = setting(
        5.0,
        "deadline of each dashboard query (503 when it fires)",
        group=DASHBOARD,
        positive=True,
    )
    dashboard_overview_cache_seconds: float = setting(
        5.0,
        "how long the overview's counts are reused (`0` recomputes every time)",
        group=DASHBOARD,
    )
    trusted_proxies: tuple[str, ...] = setting(
        ("127.0.0.1", "::1"),
        "your reverse proxies: comma-separated addresses or CIDR networks, checked against "
        "the TCP peer. Only from them are `X-Forwarded-For` (the client address for the "
        "login rate limit and the `/metrics` loopback check), `X-Forwarded-Proto` and the "
        "SSO header believed; gunicorn's `forwarded_allow_ips` is derived from it. Empty "
        "trusts no one",
        group=DASHBOARD,
        shown_default="`127.0.0.1,::1`",
        check=check_networks,
    )
    trusted_proxy_header: str = setting(
        "",
        "header carrying the user authenticated by your SSO proxy (believed only from "
        "`JOBDESK_TRUSTED_PROXIES`)",
        group=DASHBOARD,
    )
    trusted_proxy_default_role: str | None = setting(
        None,
        "role for proxy-authenticated users without an account",
        group=DASHBOARD,
        choices=ROLES,
    )
    allowed_hosts: tuple[str, ...] = setting(
        (),
        "host names the dashboard answers to (`jobs.example.com`; `.example.com` for its "
        "subdomains), others get 400; empty: any. Either way `/readyz`, and `/metrics` "
        "without a token, answer only IP-literal hosts, `localhost` and these (DNS "
        "rebinding)",
        group=DASHBOARD,
        check=check_host_names,
    )
    dashboard_bind: str = setting(
        "127.0.0.1:8000", "gunicorn bind (`deploy/gunicorn.conf.py`)", group=DASHBOARD
    )
    dashboard_workers: int = setting(
        2, "gunicorn processes (`deploy/gunicorn.conf.py`)", group=DASHBOARD, minimum=1
    )
    dashboard_threads: int = setting(
        4, "gunicorn threads per process (`deploy/gunicorn.conf.py`)", group=DASHBOARD, minimum=1
    )

    # --- nested groups
    alerts: AlertConfig = section(AlertConfig, "alert", "Alerts")
    retention: RetentionPolicy = section(
        RetentionPolicy,
        "retention",
        "Retention (days accept fractions; `never`/`off` keeps forever)",
    )

    # --- metrics and logging
    metrics_token: str = setting(
        "",
        "bearer token for the dashboard's `/metrics`; unset = loopback clients only",
        group=OBSERVABILITY,
    )
    worker_metrics_port: int | None = setting(
        None,
        "serve this worker's own metrics on this port (`0` picks a free one)",
        group=OBSERVABILITY,
        maximum=65535,
        shown_default="— (off)",
    )
    worker_metrics_host: str = setting(
        "127.0.0.1", "address for the worker metrics port", group=OBSERVABILITY
    )
    log_format: str = setting(
        "text", "worker logs: `text` or `json`", group=OBSERVABILITY, choices=("text", "json")
    )
    log_level: str = setting(
        "info",
        "worker log level; `debug` adds a line per succeeded job",
        group=OBSERVABILITY,
        choices=("debug", "info", "warning", "error"),
    )

    # --- the demo
    demo_webhook_backoff: str = setting(
        "2,4,8,16", "the demo's CRM retry schedule in seconds (`jobdesk demo` only)", group=TESTS
    )

    def trusted_proxy_networks(self) -> tuple[str, ...]:
        """`JOBDESK_TRUSTED_PROXIES` as normalised networks (`10.0.0.0/8`, `::1/128`), the
        form gunicorn's `forwarded_allow_ips` accepts."""
        return tuple(str(network) for network in networks(self.trusted_proxies))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Build settings from `environ` (default `os.environ`); raises `SettingsError`
        for an unknown `JOBDESK_*` name or a malformed value."""
        import os

        return load(cls, os.environ if environ is None else environ, KNOWN_ELSEWHERE)


def known_names() -> list[str]:
    """Every `JOBDESK_*` name Jobdesk knows, settings first."""
    return [entry.name for entry in entries(Settings)] + list(KNOWN_ELSEWHERE)


def unknown_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """One line per `JOBDESK_*` name of `environ` (default `os.environ`) that is no
    Jobdesk setting, naming the closest real one — the check `Settings.from_env` makes
    (and the worker and dashboard refuse to start on), for a process that does not
    load every setting at start: an app that enqueues."""
    import os

    known = known_names()
    names = unknown_names(os.environ if environ is None else environ, set(known))
    return [unknown_name_message(name, known) for name in names]


def settings_reference() -> str:
    """The README's settings tables, generated from the declarations above."""
    return reference_markdown(Settings, KNOWN_ELSEWHERE, TESTS)


def settings_rows(settings: Settings) -> list[dict[str, Any]]:
    """Each variable with its value in `settings` (secrets masked), for `jobdesk settings`."""
    secret = {"JOBDESK_SECRET_KEY", "JOBDESK_METRICS_TOKEN", "JOBDESK_ENCRYPTION_KEYS"}
    rows: list[dict[str, Any]] = []
    for entry in entries(Settings):
        value: Any = settings
        for part in entry.path:
            value = getattr(value, part)
        shown = "***" if entry.name in secret and value else _shown(value)
        rows.append({"name": entry.name, "value": shown, "doc": entry.spec.doc})
    return rows


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(value)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)
