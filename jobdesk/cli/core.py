"""`jobdesk migrate`, `jobdesk enqueue`, `jobdesk stats`: the schema and the queue itself."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from jobdesk.cli.app import cli, command_engine, echo_json, user_errors
from jobdesk.shared.core.errors import ValidationError


@cli.command()
@click.pass_context
@user_errors
def migrate(ctx: click.Context) -> None:
    """Create or upgrade the database schema to the latest version."""
    from jobdesk.shared.migrate import current_revision, head_revision, upgrade

    with command_engine(ctx) as engine:
        before = current_revision(engine)
        upgrade(engine)
        after = current_revision(engine)
    if before == after:
        click.echo(f"schema already at {after} (head {head_revision()})")
    else:
        click.echo(f"schema upgraded {before or 'empty'} -> {after}")


@cli.command("settings")
@click.option("--markdown", is_flag=True, help="Print the reference tables (as in the README).")
@click.option("--json", "as_json", is_flag=True, help="Print name, value and meaning as JSON.")
@user_errors
def settings_command(markdown: bool, as_json: bool) -> None:
    """Every JOBDESK_* setting with the value this environment gives it (secrets masked);
    an unknown or malformed JOBDESK_* variable is an error."""
    from jobdesk.shared.settings import Settings, settings_reference, settings_rows

    if markdown:
        click.echo(settings_reference(), nl=False)
        return
    rows = settings_rows(Settings.from_env())
    if as_json:
        echo_json(rows)
        return
    width = max(len(row["name"]) for row in rows)
    for row in rows:
        click.echo(f"{row['name']:<{width}}  {row['value']}")


def _parse_payload(raw: str) -> Any:
    """The JSON argument, or one `Error: payload …` line naming the problem (not click's
    usage preamble: the command line was fine, the JSON was not)."""
    from jobdesk.shared.core.json_text import loads_json_text

    try:
        return loads_json_text("payload", raw)
    except ValidationError as exc:
        raise click.ClickException(f"{exc.field} {exc.message}") from None


def _parse_when(raw: str | None) -> datetime | None:
    if raw is None:
        return None
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        raise click.ClickException(
            f"--run-at: {raw!r} is not an ISO 8601 date-time (e.g. 2026-12-01T09:00:00Z)"
        ) from None
    if value.tzinfo is None:
        raise click.ClickException(
            "--run-at: give a time zone, e.g. 2026-12-01T09:00:00Z or +01:00"
        )
    return value


@cli.command()
@click.argument("job_type")
@click.argument("payload", metavar="JSON")
@click.option("--queue", help="Queue name (default: the type's queue).")
@click.option("--priority", type=int, help="0 (most urgent) to 9; default 5 or the type's.")
@click.option("--run-at", help="ISO 8601 time with zone; default: now.")
@click.option("--idempotency-key", help="Enqueue at most once per key.")
@click.option("--group-key", help="Jobs sharing a group key run one at a time, in order.")
@click.option("--max-attempts", type=int, help="1-100; default 5 or the type's.")
@click.option(
    "--after", "after", type=int, multiple=True, help="Run once job ID succeeded (repeatable)."
)
@click.option(
    "--unique-for", type=float, help="With --idempotency-key: deduplicate for SECONDS only."
)
@click.option(
    "--debounce",
    type=float,
    help="With --idempotency-key: one queued job, run SECONDS after the latest enqueue.",
)
@click.option(
    "--concurrency-key",
    help="Share this key's slots: at most the type's concurrency run at once; keys take turns.",
)
@click.pass_context
@user_errors
def enqueue(
    ctx: click.Context,
    job_type: str,
    payload: str,
    queue: str | None,
    priority: int | None,
    run_at: str | None,
    idempotency_key: str | None,
    group_key: str | None,
    max_attempts: int | None,
    after: tuple[int, ...],
    unique_for: float | None,
    debounce: float | None,
    concurrency_key: str | None,
) -> None:
    """Enqueue one job of JOB_TYPE with a JSON object payload; prints the job id."""
    from jobdesk.shared.core.enqueue import enqueue as enqueue_job

    data = _parse_payload(payload)
    when = _parse_when(run_at)
    with command_engine(ctx) as engine, engine.begin() as conn:
        job_id = enqueue_job(
            conn,
            job_type,
            data,
            queue=queue,
            priority=priority,
            run_at=when,
            idempotency_key=idempotency_key,
            group_key=group_key,
            max_attempts=max_attempts,
            after=list(after) or None,
            unique_for=unique_for,
            debounce=debounce,
            concurrency_key=concurrency_key,
        )
    click.echo(job_id)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
@user_errors
def stats(ctx: click.Context, as_json: bool) -> None:
    """Counts by status, queue and type, and the oldest queued age."""
    from jobdesk.shared.operator.queries.stats import summarize

    with command_engine(ctx, sqlite_begin="DEFERRED") as engine, engine.connect() as conn:
        data = summarize(conn)
    if as_json:
        echo_json(data)
        return
    _print_stats(data)


def _print_stats(data: dict[str, Any]) -> None:
    statuses = list(data["by_status"])
    click.echo("  ".join(f"{s}={data['by_status'][s]}" for s in statuses))
    oldest = data["oldest_queued_age_seconds_max"]
    click.echo(f"total={data['total']}  oldest queued age={oldest:.1f}s")
    alerts = data.get("open_alerts", {})
    click.echo(
        f"dead letters: {data.get('dead_letters_24h', 0)} in the last 24 h, "
        f"{data.get('dead_letters_unresolved', 0)} unresolved  open alerts: "
        + (", ".join(f"{rule}={n}" for rule, n in sorted(alerts.items())) or "none")
    )
    if not data["by_queue_type"]:
        click.echo("(no jobs)")
        return
    click.echo(f"{'queue':<16} {'type':<28} " + " ".join(f"{s:>9}" for s in statuses))
    for row in data["by_queue_type"]:
        counts = row["counts"]
        cells = " ".join(f"{counts.get(s, 0):>9}" for s in statuses)
        click.echo(f"{row['queue']:<16} {row['job_type']:<28} {cells}")
