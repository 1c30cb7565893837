"""`jobdesk jobs …`: acting on single jobs from the terminal (cancel, for now)."""

from __future__ import annotations

import click

from jobdesk.cli.app import cli, cli_actor, command_engine, user_errors


@cli.group()
def jobs() -> None:
    """Single jobs: cancel queued, retrying or running ones."""


@jobs.command("cancel")
@click.argument("job_ids", nargs=-1, required=True, type=click.IntRange(min=1))
@click.option("--reason", required=True, help="Why (required, shown on the job's page).")
@click.pass_context
@user_errors
def cancel_(ctx: click.Context, job_ids: tuple[int, ...], reason: str) -> None:
    """Cancel JOB_IDS: a queued or retrying job is cancelled at once; a running one's
    worker is asked to stop it (`ctx.cancelled` now, a hard stop after the grace). Exits 1
    when a job could not be cancelled (finished, dead, unknown), after trying the rest."""
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.core.errors import ConflictError, NotFoundError
    from jobdesk.shared.operator.commands.cancellation import Cancelled, cancel_job, hard_stop_by
    from jobdesk.shared.settings import Settings

    settings = Settings.from_env()
    refused = 0
    with command_engine(ctx) as engine:
        for job_id in dict.fromkeys(job_ids):
            try:
                with engine.begin() as conn:
                    now = db_now(conn)
                    done = cancel_job(conn, job_id, actor=cli_actor(), reason=reason, now=now)
            except (ConflictError, NotFoundError) as exc:
                click.echo(f"not cancelled: {exc}", err=True)
                refused += 1
                continue
            if done is Cancelled.NOW:
                click.echo(f"job #{job_id} cancelled")
            else:
                stop_by = hard_stop_by(now, settings).strftime("%H:%M:%S UTC")
                click.echo(
                    f"job #{job_id} is running: its worker was asked to stop it "
                    f"(hard stop by {stop_by})"
                )
    if refused:
        ctx.exit(1)
