"""`jobdesk batches …`: batches of jobs (`enqueue_batch`) from the terminal — list them,
show one with its callbacks and children, cancel one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from jobdesk.cli.app import cli, cli_actor, command_engine, echo_json, limit_option, user_errors
from jobdesk.cli.workflow_text import (
    batch_dict,
    batch_progress,
    batch_title,
    first_line,
    job_ids,
    masked_error,
    ordered_counts,
    status_word,
    when,
)

if TYPE_CHECKING:
    import sqlalchemy as sa

    from jobdesk.shared.workflows.queries import BatchDetail

#: The statuses `--status` accepts (every job status; kept literal so `--help` needs no
#: import of the domain).
STATUSES = ("waiting", "queued", "running", "failed", "succeeded", "dead", "cancelled")


@cli.group()
def batches() -> None:
    """Batches of jobs (`enqueue_batch`): list them, show one with its callbacks and
    children, or cancel one."""


@batches.command("list")
@limit_option
@click.option(
    "--before",
    "before_id",
    type=click.IntRange(min=1),
    help="Only batches with an id below this one (the next page).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
@user_errors
def list_(ctx: click.Context, limit: int, before_id: int | None, as_json: bool) -> None:
    """Batches, newest first: state, how many children are final and succeeded, name."""
    from jobdesk.shared.workflows.queries import list_batches

    with command_engine(ctx, sqlite_begin="DEFERRED") as engine, engine.connect() as conn:
        rows = list_batches(conn, before_id=before_id, limit=limit)
    if as_json:
        echo_json([batch_dict(row) for row in rows])
        return
    if not rows:
        click.echo("no batches" + (f" before #{before_id}" if before_id else " yet"))
        return
    for row in rows:
        created = row.created_at.strftime("%Y-%m-%d %H:%M")
        done = f"{row.finished:,}/{row.total:,} final, {row.succeeded:,} succeeded"
        click.echo(f"#{row.id:<7} {row.state:<9} {done:<34} {created}  {row.name or '-'}")
    if len(rows) == limit:
        click.echo(f"more: jobdesk batches list --before {rows[-1].id}")


def _child(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "job_type": row["job_type"],
        "status": row["status"],
        "resolution": row["resolution"],
        "attempts": row["attempts"],
        "max_attempts": row["max_attempts"],
        "finished_at": when(row["finished_at"]),
        "last_error": masked_error(row["last_error"]),
    }


@batches.command("show")
@click.argument("batch_id", type=click.IntRange(min=1))
@click.option(
    "--status",
    type=click.Choice(STATUSES),
    help="List only the children in this status.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
@user_errors
def show(ctx: click.Context, batch_id: int, status: str | None, as_json: bool) -> None:
    """Batch BATCH_ID: its children by status, its callbacks and their states, and the
    first page of its children (a retried dead child is listed beside its retry)."""
    from jobdesk.shared.core.errors import NotFoundError
    from jobdesk.shared.workflows.queries import CHILDREN_PAGE, batch_children, get_batch

    with command_engine(ctx, sqlite_begin="DEFERRED") as engine, engine.connect() as conn:
        detail = get_batch(conn, batch_id)
        if detail is None:
            raise NotFoundError(f"batch #{batch_id} does not exist")
        # One more than a page: whether to say that there are more.
        rows = batch_children(conn, batch_id, status=status, limit=CHILDREN_PAGE + 1)
    children = [_child(row) for row in rows[:CHILDREN_PAGE]]
    more = len(rows) > CHILDREN_PAGE
    batch = detail.batch
    if as_json:
        echo_json(
            {
                "batch": batch_dict(batch),
                "counts": detail.counts,
                "callbacks": [
                    {"kind": c.kind, "id": c.id, "job_type": c.job_type, "status": c.status}
                    for c in detail.callbacks
                ],
                "children": children,
                "more_children": more,
            }
        )
        return
    click.echo(f"{batch_title(batch)}: {batch_progress(batch)}")
    finished = f", finished {when(batch.finished_at)}" if batch.finished_at else ""
    click.echo(f"created {when(batch.created_at)}{finished}")
    if batch.cancelled_at is not None:
        click.echo(
            f"cancelled by {batch.cancelled_by} at {when(batch.cancelled_at)}: "
            f"{batch.cancel_reason}"
        )
    click.echo(f"children by status: {ordered_counts(detail.counts)}")
    for callback in detail.callbacks:
        click.echo(
            f"{callback.kind + ':':<12}job #{callback.id} {callback.job_type or '?'} "
            f"{status_word(callback.status)}"
        )
    if not detail.callbacks:
        click.echo("no callbacks")
    if children:
        click.echo(f"children{f' {status}' if status else ''}:")
    for child in children:
        tries = f"{child['attempts']}/{child['max_attempts']}"
        click.echo(
            f"  #{child['id']:<8} {child['job_type']:<24} "
            f"{status_word(child['status'], child['resolution']):<20} {tries:<7} "
            f"{first_line(child['last_error'], 80)}".rstrip()
        )
    if not children:
        click.echo(f"no children{f' {status}' if status else ''}")
    if more:
        click.echo(
            f"first {CHILDREN_PAGE} shown; narrow with --status, or see every child "
            f"on the dashboard's /batches/{batch_id}"
        )


@batches.command("cancel")
@click.argument("batch_id", type=click.IntRange(min=1))
@click.option("--reason", required=True, help="Why (required, kept in the audit log).")
@click.pass_context
@user_errors
def cancel(ctx: click.Context, batch_id: int, reason: str) -> None:
    """Cancel batch BATCH_ID: children not started are cancelled, running ones' workers
    are asked to stop them, `on_success` is cancelled; `on_finish` still runs once every
    child is final. Audited, with the reason."""
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.core.validation import check_reason
    from jobdesk.shared.operator.commands.cancellation import hard_stop_by
    from jobdesk.shared.settings import Settings
    from jobdesk.shared.workflows.batch_cancel import cancel_batch
    from jobdesk.shared.workflows.queries import get_batch

    why = check_reason(reason, required=True)
    assert why is not None  # required: a blank one raised
    settings = Settings.from_env()
    with command_engine(ctx) as engine, engine.begin() as conn:
        before = _cancellable(conn, batch_id)
        now = db_now(conn)
        done = cancel_batch(conn, batch_id, actor=cli_actor(), reason=why, now=now)
        after = get_batch(conn, batch_id)
    assert after is not None  # it existed a moment ago, in this transaction
    on_success = before.batch.on_success_job_id
    children = [job_id for job_id in done["cancelled"] if job_id != on_success]
    click.echo(f"{batch_title(before.batch)} cancelled")
    if children:
        click.echo(f"cancelled {len(children):,} not started: {job_ids(children)}")
    if on_success is not None and on_success in done["cancelled"]:
        click.echo(f"cancelled on_success job #{on_success}")
    if done["asked"]:
        stop_by = hard_stop_by(now, settings).strftime("%H:%M:%S UTC")
        click.echo(
            f"asked {len(done['asked']):,} running to stop (their workers end them "
            f"cancelled, hard stop by {stop_by}): {job_ids(done['asked'])}"
        )
    for callback in after.callbacks:
        if callback.kind != "on_finish":
            continue
        if callback.status == "waiting":
            click.echo(f"on_finish job #{callback.id} runs once every child is final")
        else:
            click.echo(f"on_finish job #{callback.id} is {status_word(callback.status)}")


def _cancellable(conn: sa.Connection, batch_id: int) -> BatchDetail:
    """The batch, if it is still running. As on its dashboard page, only a batch with
    unfinished children can be cancelled: once every child is final there is nothing to
    stop, and marking it cancelled would only hide how it ended."""
    from jobdesk.shared.core.errors import ConflictError, NotFoundError
    from jobdesk.shared.workflows.queries import get_batch

    detail = get_batch(conn, batch_id)
    if detail is None:
        raise NotFoundError(f"batch #{batch_id} does not exist")
    batch = detail.batch
    if batch.cancelled_at is not None:
        raise ConflictError(
            f"batch #{batch_id} was already cancelled by {batch.cancelled_by}: "
            f"{batch.cancel_reason}"
        )
    if batch.state != "running":
        raise ConflictError(
            f"batch #{batch_id} is already {batch.state}: every child is final "
            f"({ordered_counts(detail.counts)})"
        )
    return detail
