"""`jobdesk schedules …`: the recurring jobs, from the terminal (list, pause, resume, run)."""

from __future__ import annotations

from typing import Any

import click

from jobdesk.cli.app import cli, cli_actor, command_engine, echo_json, user_errors


@cli.group()
def schedules() -> None:
    """Recurring jobs declared in code: list them, pause or resume one, run one now."""


def _row(schedule: Any) -> dict[str, Any]:
    return {
        "name": schedule.name,
        "job_type": schedule.job_type,
        "when": schedule.description,
        "next_run_at": schedule.next_run_at.isoformat(),
        "last_run_at": schedule.last_slot_at.isoformat() if schedule.last_slot_at else None,
        "last_job_id": schedule.last_job_id,
        "last_status": schedule.last_status,
        "paused": schedule.paused,
        "paused_by": schedule.paused_by,
        "paused_reason": schedule.paused_reason,
    }


@schedules.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
@user_errors
def list_(ctx: click.Context, as_json: bool) -> None:
    """Each schedule with its next run, last run and that run's status."""
    from jobdesk.shared.schedules.store import list_schedules

    with command_engine(ctx, sqlite_begin="DEFERRED") as engine, engine.connect() as conn:
        rows = [_row(schedule) for schedule in list_schedules(conn)]
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("no schedules yet: they appear once a worker that declares them starts")
        return
    for row in rows:
        state = f"PAUSED by {row['paused_by']}: {row['paused_reason']}" if row["paused"] else ""
        last = (
            f"last {row['last_run_at']} job #{row['last_job_id']} {row['last_status']}"
            if row["last_job_id"]
            else "never run"
        )
        click.echo(f"{row['name']}  ({row['job_type']}, {row['when']})")
        click.echo(f"    next {row['next_run_at']}  {last}  {state}".rstrip())


@schedules.command("pause")
@click.argument("name")
@click.option("--reason", required=True, help="Why (required, shown to everyone).")
@click.pass_context
@user_errors
def pause_(ctx: click.Context, name: str, reason: str) -> None:
    """Stop schedule NAME from firing until it is resumed."""
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.schedules.store import pause

    with command_engine(ctx) as engine, engine.begin() as conn:
        pause(conn, name, actor=cli_actor(), reason=reason, now=db_now(conn))
    click.echo(f"schedule {name} paused")


@schedules.command("resume")
@click.argument("name")
@click.option("--reason", help="Why (kept in the audit log).")
@click.pass_context
@user_errors
def resume_(ctx: click.Context, name: str, reason: str | None) -> None:
    """Let schedule NAME fire again from its next slot (missed ones only with catch_up)."""
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.schedules.store import resume

    with command_engine(ctx) as engine, engine.begin() as conn:
        row = resume(conn, name, actor=cli_actor(), reason=reason, now=db_now(conn))
    click.echo(f"schedule {name} resumed; next run {row.next_run_at.isoformat()}")


@schedules.command("run")
@click.argument("name")
@click.option("--reason", help="Why (kept in the audit log).")
@click.pass_context
@user_errors
def run_(ctx: click.Context, name: str, reason: str | None) -> None:
    """Enqueue one extra run of schedule NAME now (its slots are not affected)."""
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.schedules.store import run_now

    with command_engine(ctx) as engine, engine.begin() as conn:
        job_id = run_now(conn, name, actor=cli_actor(), reason=reason, now=db_now(conn))
    click.echo(f"enqueued job #{job_id} for schedule {name}")
