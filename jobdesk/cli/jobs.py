"""`jobdesk jobs …`: single jobs from the terminal — show one (with its place in a batch
and its `after=` dependencies), cancel some."""

from __future__ import annotations

from typing import Any

import click

from jobdesk.cli.app import cli, cli_actor, command_engine, echo_json, user_errors


@cli.group()
def jobs() -> None:
    """Single jobs: show one, or cancel queued, retrying, waiting or running ones."""


@jobs.command("show")
@click.argument("job_id", type=click.IntRange(min=1))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
@user_errors
def show(ctx: click.Context, job_id: int, as_json: bool) -> None:
    """Job JOB_ID: its type, queue, status and attempts, its last error, the batch it
    belongs to (as a child or a callback), the jobs it waits for and that wait for it,
    and — while it is waiting — why."""
    from jobdesk.shared.operator.queries.jobs import job_detail
    from jobdesk.shared.workflows.queries import job_workflow

    with command_engine(ctx, sqlite_begin="DEFERRED") as engine, engine.connect() as conn:
        detail = job_detail(conn, job_id)
        workflow = job_workflow(conn, job_id, detail.job["status"])
    shown = _shown(detail, workflow)
    if as_json:
        echo_json(shown)
        return
    _print(shown, workflow)


def _shown(detail: Any, workflow: Any) -> dict[str, Any]:
    from jobdesk.cli.workflow_text import batch_dict, masked_document, masked_error, when

    job = detail.job
    return {
        "id": job["id"],
        "job_type": job["job_type"],
        "queue": job["queue"],
        "status": job["status"],
        "resolution": job["resolution"],
        "priority": job["priority"],
        "attempts": job["attempts"],
        "max_attempts": job["max_attempts"],
        "created_at": when(job["created_at"]),
        "next_run_at": when(job["next_run_at"]),
        "finished_at": when(job["finished_at"]),
        "last_error": masked_error(job["last_error"]),
        "resolved_by": job["resolved_by"],
        "resolution_reason": job["resolution_reason"],
        "cancelled_by": job["cancelled_by"],
        "cancel_reason": job["cancel_reason"],
        "result": masked_document(job["result"]),
        "retried_from_id": job["retried_from_id"],
        "retried_as": [linked.id for linked in detail.retried_as],
        "batch": batch_dict(workflow.batch) if workflow.batch else None,
        "callback_of": workflow.callback_of,
        "dependencies": workflow.dependencies,
        "dependents": workflow.dependents,
        "waiting_reason": workflow.waiting_reason,
    }


def _print(shown: dict[str, Any], workflow: Any) -> None:
    from jobdesk.cli.workflow_text import (
        batch_progress,
        batch_title,
        first_line,
        linked_jobs,
        status_word,
    )

    click.echo(
        f"job #{shown['id']}  {shown['job_type']}  queue {shown['queue']}  "
        f"{status_word(shown['status'], shown['resolution'])}"
    )
    times = f"created {shown['created_at']}"
    if shown["status"] in ("queued", "failed"):
        times += f", next run {shown['next_run_at']}"
    if shown["finished_at"]:
        times += f", finished {shown['finished_at']}"
    click.echo(f"attempts {shown['attempts']}/{shown['max_attempts']}, {times}")
    if shown["last_error"]:
        click.echo(f"last error: {first_line(shown['last_error'])}")
    if shown["resolution"]:
        click.echo(
            f"{shown['resolution']} by {shown['resolved_by']}: {shown['resolution_reason'] or '-'}"
        )
    if shown["cancel_reason"]:
        asked = "asked to stop" if shown["status"] == "running" else "cancelled"
        click.echo(f"{asked} by {shown['cancelled_by']}: {shown['cancel_reason']}")
    if shown["retried_from_id"]:
        click.echo(f"retry of dead job #{shown['retried_from_id']}")
    if shown["retried_as"]:
        click.echo("retried as " + " ".join(f"#{job_id}" for job_id in shown["retried_as"]))
    if workflow.batch is not None:
        role = f"its {workflow.callback_of} callback" if workflow.callback_of else "a child"
        click.echo(f"{batch_title(workflow.batch)} ({role}): {batch_progress(workflow.batch)}")
    if workflow.dependencies:
        click.echo(f"runs after: {linked_jobs(workflow.dependencies)}")
    if workflow.dependents:
        click.echo(f"needed by: {linked_jobs(workflow.dependents)}")
    if workflow.waiting_reason:
        click.echo(workflow.waiting_reason)


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
