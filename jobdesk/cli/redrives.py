"""`jobdesk redrives …`: paced redrives from the terminal — start one on an error group or
a dead-letter filter, list them with their progress, show one, pause, resume, cancel."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from jobdesk.cli.app import cli, cli_actor, command_engine, echo_json, limit_option, user_errors

if TYPE_CHECKING:
    from jobdesk.shared.redrives.queries import RedriveView

#: Kept literal so `--help` needs no import of the domain (`operator.filters.RANGES`).
RANGES = ("1h", "24h", "7d", "30d")


@cli.group()
def redrives() -> None:
    """Paced redrives: retry the dead jobs of an error group or a filter at a chosen rate,
    stopping by themselves when the new jobs fail again."""


def _actor_option(func: Any) -> Any:
    return click.option(
        "--actor",
        "--by",
        "actor",
        default=cli_actor,
        show_default="cli:$USER",
        help="Who the audit log records as having done it.",
    )(func)


def redrive_dict(redrive: RedriveView) -> dict[str, Any]:
    from jobdesk.shared.redrives.queries import redrive_progress

    return {
        "id": redrive.id,
        "state": redrive.state,
        "description": redrive.description,
        "selection": redrive.selection,
        "reason": redrive.reason,
        "rate_per_minute": redrive.rate_per_minute,
        "stop_rule": f"{redrive.stop_failures}/{redrive.stop_window}",
        "jobs": redrive.total,
        "requeued": redrive.requeued,
        "skipped": redrive.skipped,
        "succeeded": redrive.succeeded,
        "failed_again": redrive.failed,
        "awaiting_outcome": redrive.awaiting,
        "progress": redrive_progress(redrive),
        "created_by": redrive.created_by,
        "created_at": redrive.created_at.isoformat(),
        "changed_by": redrive.changed_by,
        "changed_at": redrive.changed_at.isoformat() if redrive.changed_at else None,
        "change_reason": redrive.change_reason,
        "stopped_reason": redrive.stopped_reason,
        "finished_at": redrive.finished_at.isoformat() if redrive.finished_at else None,
    }


@redrives.command("start")
@click.option(
    "--group", "fingerprint", help="Error group (16 hex digits, from `dead list --groups`)."
)
@click.option("--type", "--job-type", "job_type", help="Job type, e.g. webhook.deliver.")
@click.option("--queue", help="Queue name.")
@click.option("--error", "--error-contains", "error", help="Text the error contains.")
@click.option(
    "--range", "time_range", type=click.Choice(RANGES), help="Went dead within this window."
)
@click.option(
    "--rate",
    metavar="RATE",
    default="60/min",
    show_default=True,
    help="How fast: jobs per minute (60/min), per second (2/s) or per hour (120/h).",
)
@click.option(
    "--stop-after",
    metavar="K/N",
    default="5/20",
    show_default=True,
    help="Stop once K of the first (then the latest) N new jobs fail again: K/N.",
)
@click.option("--reason", required=True, help="Why (required, kept in the audit log).")
@_actor_option
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
@user_errors
def start(
    ctx: click.Context,
    /,
    fingerprint: str | None,
    job_type: str | None,
    queue: str | None,
    error: str | None,
    time_range: str | None,
    rate: str,
    stop_after: str,
    reason: str,
    actor: str,
    yes: bool,
) -> None:
    """Start a redrive of the dead jobs that need a decision and match the filters:
    requeued as new jobs at RATE, stopping by itself by the --stop-after rule. Prints the
    redrive's id; the worker's leader does the requeueing."""
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.core.validation import check_reason
    from jobdesk.shared.operator.filters import JobFilters
    from jobdesk.shared.redrives.commands import start_redrive
    from jobdesk.shared.redrives.rules import parse_rate, parse_stop_rule
    from jobdesk.shared.redrives.selection import preview_redrive

    args = {
        "fingerprint": fingerprint,
        "type": job_type,
        "queue": queue,
        "error": error,
        "range": time_range,
        "time": "finished" if time_range else None,
    }
    filters = JobFilters.from_args({name: value for name, value in args.items() if value})
    per_minute = parse_rate(rate)
    rule = parse_stop_rule(stop_after)
    check_reason(reason, required=True)
    with command_engine(ctx) as engine:
        with engine.connect() as conn:
            preview = preview_redrive(conn, filters, now=db_now(conn))
            conn.rollback()
        if preview.jobs == 0:
            raise click.ClickException(
                f"nothing to redrive: no dead job that needs a decision matches "
                f"{preview.description}"
                + (f" ({preview.held:,} held by another redrive)" if preview.held else "")
            )
        click.echo(
            f"redrive {preview.jobs:,} dead jobs ({preview.description}) at "
            f"{per_minute:,}/min, stopping if {rule} new jobs fail again"
        )
        if preview.held:
            click.echo(f"leaving out {preview.held:,} that another running redrive holds")
        if preview.capped:
            click.echo(f"capped at {preview.cap:,} per redrive; start another for the rest")
        if not yes and not click.confirm("Proceed?", default=False):
            raise click.ClickException("cancelled; nothing changed")
        with engine.begin() as conn:
            redrive_id = start_redrive(
                conn,
                filters,
                rate_per_minute=per_minute,
                stop_rule=rule,
                actor=actor,
                reason=reason,
                now=db_now(conn),
            )
    click.echo(f"started redrive #{redrive_id}")


@redrives.command("list")
@limit_option
@click.option(
    "--before",
    "before_id",
    type=click.IntRange(min=1),
    help="Only redrives with an id below this one (the next page).",
)
@click.option("--active", is_flag=True, help="Only running or paused redrives.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
@user_errors
def list_(
    ctx: click.Context, limit: int, before_id: int | None, active: bool, as_json: bool
) -> None:
    """Redrives, newest first: state, progress, pace and what they retry."""
    from jobdesk.shared.redrives.queries import list_redrives, redrive_progress

    with command_engine(ctx, sqlite_begin="DEFERRED") as engine, engine.connect() as conn:
        rows = list_redrives(conn, before_id=before_id, limit=limit, active_only=active)
    if as_json:
        echo_json([redrive_dict(row) for row in rows])
        return
    if not rows:
        click.echo("no redrives" + (f" before #{before_id}" if before_id else " yet"))
        return
    for row in rows:
        click.echo(
            f"#{row.id:<6} {row.state:<9} {redrive_progress(row)}"
            f"  ({row.rate_per_minute:,}/min, stop {row.stop_failures}/{row.stop_window},"
            f" by {row.created_by})"
        )
        click.echo(f"        {row.description}")
    if len(rows) == limit:
        click.echo(f"more: jobdesk redrives list --before {rows[-1].id}")


@redrives.command("show")
@click.argument("redrive_id", type=click.IntRange(min=1))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
@user_errors
def show(ctx: click.Context, redrive_id: int, as_json: bool) -> None:
    """Redrive REDRIVE_ID: what it retries, its pace and rule, its progress, who changed
    it last and why, and the latest new jobs that failed again."""
    from jobdesk.cli.workflow_text import first_line, masked_error, when
    from jobdesk.shared.core.errors import NotFoundError
    from jobdesk.shared.redrives.queries import failed_again, get_redrive, redrive_progress

    with command_engine(ctx, sqlite_begin="DEFERRED") as engine, engine.connect() as conn:
        found = get_redrive(conn, redrive_id)
        if found is None:
            raise NotFoundError(f"redrive #{redrive_id} does not exist")
        failing = failed_again(conn, redrive_id)
    if as_json:
        echo_json(
            {
                "redrive": redrive_dict(found),
                "failed_again": [
                    {
                        "job_id": entry.job_id,
                        "new_job_id": entry.new_job_id,
                        "status": entry.status,
                        "error": masked_error(entry.error),
                    }
                    for entry in failing
                ],
            }
        )
        return
    click.echo(f"redrive #{found.id} {found.state}: {redrive_progress(found)}")
    click.echo(f"retries: {found.description}")
    click.echo(
        f"pace: {found.rate_per_minute:,}/min; stops once {found.stop_rule} new jobs fail again"
    )
    click.echo(f"started by {found.created_by} at {when(found.created_at)}: {found.reason}")
    if found.on_probation:
        click.echo(f"waiting for the first {found.stop_window} new jobs' outcomes before going on")
    if found.changed_by and found.changed_at and found.changed_at != found.created_at:
        why = f": {found.change_reason}" if found.change_reason else ""
        click.echo(f"{found.state} by {found.changed_by} at {when(found.changed_at)}{why}")
    if found.stopped_reason:
        click.echo(f"stopped: {found.stopped_reason}")
    for entry in failing:
        click.echo(
            f"  #{entry.job_id} -> #{entry.new_job_id} {entry.status or 'deleted':<10} "
            f"{first_line(masked_error(entry.error), 80)}".rstrip()
        )


@redrives.command("pause")
@click.argument("redrive_id", type=click.IntRange(min=1))
@click.option("--reason", required=True, help="Why (required, kept in the audit log).")
@_actor_option
@click.pass_context
@user_errors
def pause(ctx: click.Context, redrive_id: int, reason: str, actor: str) -> None:
    """Pause redrive REDRIVE_ID: nothing more is requeued until it is resumed."""
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.redrives.commands import pause_redrive

    with command_engine(ctx) as engine, engine.begin() as conn:
        pause_redrive(conn, redrive_id, actor=actor, reason=reason, now=db_now(conn))
    click.echo(f"paused redrive #{redrive_id}")


@redrives.command("resume")
@click.argument("redrive_id", type=click.IntRange(min=1))
@click.option("--reason", help="Why (optional, kept in the audit log).")
@_actor_option
@click.pass_context
@user_errors
def resume(ctx: click.Context, redrive_id: int, reason: str | None, actor: str) -> None:
    """Resume paused redrive REDRIVE_ID at its pace, counted from now."""
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.redrives.commands import resume_redrive

    with command_engine(ctx) as engine, engine.begin() as conn:
        resume_redrive(conn, redrive_id, actor=actor, reason=reason, now=db_now(conn))
    click.echo(f"resumed redrive #{redrive_id}")


@redrives.command("cancel")
@click.argument("redrive_id", type=click.IntRange(min=1))
@click.option("--reason", required=True, help="Why (required, kept in the audit log).")
@_actor_option
@click.pass_context
@user_errors
def cancel(ctx: click.Context, redrive_id: int, reason: str, actor: str) -> None:
    """Cancel redrive REDRIVE_ID for good: the dead jobs it has not reached stay dead,
    waiting for a decision; the new jobs it made run on."""
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.redrives.commands import cancel_redrive

    with command_engine(ctx) as engine, engine.begin() as conn:
        cancel_redrive(conn, redrive_id, actor=actor, reason=reason, now=db_now(conn))
    click.echo(f"cancelled redrive #{redrive_id}")
