"""`jobdesk types`: the job types workers published, with the defaults `enqueue` uses."""

from __future__ import annotations

import click

from jobdesk.cli.app import cli, command_engine, echo_json, user_errors


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
@user_errors
def types(ctx: click.Context, as_json: bool) -> None:
    """Job types workers published: queue, priority, attempts and timeout that enqueue
    uses where the type's module is not imported, and which worker published them last."""
    from jobdesk.shared.core.published_types import list_published

    with command_engine(ctx, sqlite_begin="DEFERRED") as engine, engine.connect() as conn:
        rows = [
            {
                "job_type": row.job_type,
                "queue": row.defaults.queue,
                "priority": row.defaults.priority,
                "max_attempts": row.defaults.max_attempts,
                "timeout_seconds": row.defaults.timeout_seconds,
                "published_by": row.published_by,
                "published_at": row.published_at.isoformat(),
            }
            for row in list_published(conn)
        ]
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("no job types published yet: each worker publishes its types when it starts")
        return
    for row in rows:
        timeout = row["timeout_seconds"]
        click.echo(
            f"{row['job_type']}  queue {row['queue']}, priority {row['priority']}, "
            f"{row['max_attempts']} attempts, "
            f"timeout {'-' if timeout is None else f'{timeout:g}s'}  "
            f"(published by {row['published_by']} at {row['published_at']})"
        )
