"""`jobdesk worker`: run jobs until SIGTERM."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import click

from jobdesk.cli.app import cli, engine_from, user_errors

if TYPE_CHECKING:
    import sqlalchemy as sa

    from jobdesk.shared.settings import Settings
    from jobdesk.worker.completer import RecordOutcomes
    from jobdesk.worker.watchdog import FreezeWatchdog


@cli.command("worker")
@click.option(
    "--queues",
    metavar="SPEC",
    help="Queues to work and their slots: 'email,webhooks' share --concurrency slots; "
    "'email=4,reports=1' gives each queue its own slots so urgent queues never wait "
    "behind slow ones. Default: every queue. (env JOBDESK_QUEUES)",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 1000),
    help="Handlers running at once in this process (for queues listed without '=N'). "
    "(env JOBDESK_CONCURRENCY, default 10)",
)
@click.option(
    "--async-concurrency",
    type=click.IntRange(1, 10000),
    help="`async def` handlers (`webhook.deliver` among them) in flight at once per slot "
    "group, on the worker's event loop. (env JOBDESK_ASYNC_CONCURRENCY, default 200)",
)
@click.option(
    "--jobs",
    "job_modules",
    metavar="MOD[,MOD]",
    multiple=True,
    help="Importable modules that register job types with @job; repeat or separate with "
    "commas. Replaces JOBDESK_JOB_MODULES. The current directory is importable.",
)
@click.option(
    "--shutdown-timeout",
    type=click.FloatRange(0),
    metavar="SECONDS",
    help="Grace period on SIGTERM for running jobs before they are released back to the "
    "queue (attempt not counted). (env JOBDESK_SHUTDOWN_TIMEOUT_SECONDS, default 30)",
)
@click.option(
    "--poll-interval",
    type=click.FloatRange(0, min_open=True),
    metavar="SECONDS",
    help="How often to look for due jobs without a wake-up (PostgreSQL also wakes on "
    "enqueue via LISTEN/NOTIFY; SQLite polls only). (env JOBDESK_POLL_INTERVAL_SECONDS, "
    "default 1)",
)
@click.option(
    "--lease",
    type=click.FloatRange(1),
    metavar="SECONDS",
    help="Lease on claimed jobs, renewed by heartbeats while they run; a worker silent "
    "this long is presumed dead and its jobs are retried. (env JOBDESK_LEASE_SECONDS, "
    "default 30)",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    help="Log lines as text or one JSON object per line. (env JOBDESK_LOG_FORMAT, default text)",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    help="'debug' adds one line per succeeded job (other outcomes are logged at info). "
    "(env JOBDESK_LOG_LEVEL, default info)",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    metavar="PORT",
    help="Serve this process's Prometheus metrics (jobs finished by type and outcome, "
    "attempt durations) on this port; 0 picks a free one. Bound to "
    "JOBDESK_WORKER_METRICS_HOST (default 127.0.0.1). Off unless set. "
    "(env JOBDESK_WORKER_METRICS_PORT)",
)
@click.pass_context
@user_errors
def worker(
    ctx: click.Context,
    queues: str | None,
    concurrency: int | None,
    async_concurrency: int | None,
    job_modules: tuple[str, ...],
    shutdown_timeout: float | None,
    poll_interval: float | None,
    lease: float | None,
    log_format: str | None,
    log_level: str | None,
    metrics_port: int | None,
) -> None:
    """Run jobs: claim due jobs of the registered types, run them with timeouts and
    retries, until SIGTERM or SIGINT (graceful: running jobs finish or are released;
    a second signal releases them at once).

    Run one per container or systemd unit with `exec jobdesk worker` so signals reach
    it. Any number of workers on any number of hosts may share one PostgreSQL database;
    exactly one of them (elected through the database) runs maintenance such as the
    reaper. Exit status: 0 after a clean shutdown, 3 when too many handler threads
    were stuck past their timeout (restart it), 1 on a configuration error or when the
    watchdog found the process frozen (see JOBDESK_WATCHDOG_SECONDS).
    """
    from jobdesk.shared.core.job_types import JobModuleError, load_modules
    from jobdesk.shared.core.leases import transaction_bound
    from jobdesk.shared.settings import Settings
    from jobdesk.worker import logs
    from jobdesk.worker.config import RESERVED_CONNECTIONS, ConfigError, WorkerConfig
    from jobdesk.worker.registry import registry
    from jobdesk.worker.runner import Runner

    options = {
        "queues": queues,
        "concurrency": concurrency,
        "async_concurrency": async_concurrency,
        "shutdown_timeout_seconds": shutdown_timeout,
        "poll_interval_seconds": poll_interval,
        "lease_seconds": lease,
        "log_format": log_format,
        "log_level": log_level,
        "worker_metrics_port": metrics_port,
    }
    overrides: dict[str, object] = {k: v for k, v in options.items() if v is not None}
    modules = [m.strip() for raw in job_modules for m in raw.split(",") if m.strip()]
    if modules:
        overrides["job_modules"] = tuple(modules)
    settings = dataclasses.replace(Settings.from_env(), **overrides)  # type: ignore[arg-type]
    logs.configure(settings.log_format, settings.log_level)
    try:
        config = WorkerConfig.build(
            settings, queues=settings.queues, concurrency=settings.concurrency
        )
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        if importlib.util.find_spec("jobdesk.worker.jobs") is not None:
            load_modules(["jobdesk.worker.jobs"])
        load_modules(settings.job_modules)
    except JobModuleError as exc:
        raise click.ClickException(str(exc)) from None
    if not len(registry):
        raise click.ClickException(
            "no job types registered: name your job modules with --jobs or JOBDESK_JOB_MODULES"
        )
    # D4: the runtime (claims, completer, heartbeat, maintenance) has its own pool, so
    # handlers holding every connection can never starve lease renewal or completion.
    engine = engine_from(
        ctx,
        pool_size=RESERVED_CONNECTIONS,
        application_name="jobdesk-worker",
        index_plans=True,
        # A worker frozen inside one of its transactions frees the rows it holds within
        # half a lease (the reaper and operators' cancels wait for those rows).
        idle_in_transaction_seconds=transaction_bound(settings.lease_seconds),
    )
    handler_pool = min(config.handler_threads, settings.db_pool_size)
    handler_engine = engine_from(ctx, pool_size=handler_pool, application_name="jobdesk-jobs")
    if config.total_slots > settings.db_pool_size:
        click.echo(
            f"note: {config.total_slots} slots share {settings.db_pool_size} database "
            "connections for handlers (JOBDESK_DB_POOL_SIZE); handlers that use the "
            "database may wait for one",
            err=True,
        )
    _check_connection_budget(engine, config.handler_threads, settings)
    watchdog = _watchdog(settings, engine, registry.policy_for)
    # Its witness is forked: before any thread starts (the metrics server has one).
    watchdog.prepare()
    try:
        with _metrics(settings) as record_outcomes:
            runner = Runner(
                engine,
                registry=registry,
                config=config,
                settings=settings,
                handler_engine=handler_engine,
                tune_gc=True,
                record_outcomes=record_outcomes,
                watchdog=watchdog,
            )
            code = runner.run()
    finally:
        watchdog.stop()
    engine.dispose()
    handler_engine.dispose()
    ctx.exit(code)


def _watchdog(settings: Settings, engine: sa.Engine, policy_for: Any) -> FreezeWatchdog:
    """The worker's freeze watchdog, with its witness (see `jobdesk.worker.watchdog`)."""
    from jobdesk.worker.watchdog import MIN_LIMIT_SECONDS, FreezeWatchdog, default_limit
    from jobdesk.worker.witness import Witness

    limit = settings.watchdog_seconds
    if limit is None:
        limit = default_limit(settings.lease_seconds)
    elif 0 < limit < MIN_LIMIT_SECONDS:
        raise click.ClickException(
            f"JOBDESK_WATCHDOG_SECONDS={limit:g}: must be 0 (off) or at least "
            f"{MIN_LIMIT_SECONDS:g} seconds"
        )
    url = engine.url.render_as_string(hide_password=False)
    return FreezeWatchdog(limit, witness=Witness(url, settings, policy_for))


def _check_connection_budget(engine: sa.Engine, total_slots: int, settings: Settings) -> None:
    """Refuse a fleet that cannot fit in the server's max_connections; warn when this
    process alone might not (PostgreSQL only; SQLite has no connection limit)."""
    import sqlalchemy as sa

    from jobdesk.shared.core.capacity import server_capacity
    from jobdesk.shared.core.driver import driver
    from jobdesk.worker.budget import BudgetError, budget_for, check_budget
    from jobdesk.worker.config import RESERVED_CONNECTIONS

    if not driver(engine).locks_rows:  # SQLite: no server, no connection budget
        return
    budget = budget_for(total_slots, settings, RESERVED_CONNECTIONS)
    if not budget.per_process:
        return  # behind PgBouncer without a LISTEN connection: nothing goes direct
    try:
        with engine.connect() as conn:
            capacity = server_capacity(conn)
    except sa.exc.OperationalError as exc:
        # The worker waits for the database like after any outage; it never exits for it.
        detail = str(exc.orig or exc).strip().splitlines()
        click.echo(
            "warning: connection budget not checked, the database is unavailable "
            f"({detail[0] if detail else type(exc).__name__})",
            err=True,
        )
        return
    try:
        warning = check_budget(budget, settings, capacity)
    except BudgetError as exc:
        raise click.ClickException(str(exc)) from None
    if warning:
        click.echo(f"warning: {warning}", err=True)


@contextlib.contextmanager
def _metrics(settings: Settings) -> Iterator[RecordOutcomes | None]:
    """Serve metrics while the worker runs, when a port is configured, and count them as
    OpenTelemetry metrics too when a meter provider is; yields the completer's hook
    (None: metrics off, nothing is recorded)."""
    from jobdesk.shared.tracing.otel import outcome_recorder
    from jobdesk.worker.metrics import metrics_address, record_outcomes, start_metrics_server

    otel = outcome_recorder()
    address = metrics_address(settings)
    if address is None:
        yield otel
        return
    hook: RecordOutcomes = record_outcomes
    if otel is not None:

        def hook(finished: Sequence[tuple[str, str, float]]) -> None:
            record_outcomes(finished)
            otel(finished)

    host, port = address
    try:
        server = start_metrics_server(port, host)
    except OSError as exc:
        raise click.ClickException(
            f"--metrics-port / JOBDESK_WORKER_METRICS_PORT: cannot listen on {host}:{port}: "
            f"{exc.strerror or exc}"
        ) from None
    logging.getLogger("jobdesk.worker").info(
        "metrics on http://%s:%d/metrics",
        host,
        server.port,
        extra={"action": "metrics_listening", "host": host, "port": server.port},
    )
    try:
        yield hook
    finally:
        server.stop()
