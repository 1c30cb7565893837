"""`jobdesk queues …`: each queue's backlog and recent outcomes, and pausing one."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import click

from jobdesk.cli.app import cli, cli_actor, command_engine, echo_json, user_errors


@cli.group()
def queues() -> None:
    """Queues: list them with their backlog, pause one (no worker claims its jobs, none
    loses an attempt) or resume it."""


def _row(summary: Any) -> dict[str, Any]:
    pause = summary.pause
    return {
        "queue": summary.name,
        "counts": summary.counts,
        "oldest_waiting_seconds": summary.oldest_waiting_seconds,
        "recent": [
            {
                "minutes": r.minutes,
                "succeeded": r.succeeded,
                "failed": r.failed,
                "at_least": r.capped,
            }
            for r in summary.recent
        ],
        "workers": summary.workers,
        "paused": pause is not None,
        "paused_by": pause.paused_by if pause else None,
        "paused_at": pause.paused_at.isoformat() if pause else None,
        "paused_reason": pause.reason if pause else None,
    }


@queues.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
@user_errors
def list_(ctx: click.Context, as_json: bool) -> None:
    """Each queue: jobs by state, the oldest waiting, what finished and failed in the
    last 5 and 60 minutes, the live workers serving it, and whether it is paused."""
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.operator.queries.queues import queue_summaries
    from jobdesk.shared.settings import Settings

    settings = Settings.from_env()
    with command_engine(ctx, sqlite_begin="DEFERRED") as engine, engine.connect() as conn:
        now = db_now(conn)
        live_since = now - timedelta(seconds=max(3 * settings.heartbeat_seconds, 30.0))
        rows = [_row(s) for s in queue_summaries(conn, now=now, live_since=live_since)]
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("no queues yet: a queue appears with its first job")
        return
    for row in rows:
        counts = " ".join(f"{state}={n}" for state, n in sorted(row["counts"].items()) if n)
        oldest = row["oldest_waiting_seconds"]
        waited = f"  oldest waiting {oldest:.0f}s" if oldest is not None else ""
        state = f"  PAUSED by {row['paused_by']}: {row['paused_reason']}" if row["paused"] else ""
        click.echo(f"{row['queue']}{state}")
        click.echo(f"    {counts or 'no jobs'}{waited}")
        recent = ", ".join(
            f"{r['minutes']} min: {'≥' if r['at_least'] else ''}{r['succeeded']} ok "
            f"{r['failed']} failed"
            for r in row["recent"]
        )
        served = ", ".join(row["workers"]) or "no live worker"
        click.echo(f"    {recent}; served by {served}")


@queues.command("pause")
@click.argument("name")
@click.option("--reason", required=True, help="Why (required, shown to everyone).")
@click.pass_context
@user_errors
def pause_(ctx: click.Context, name: str, reason: str) -> None:
    """Stop every worker from claiming queue NAME's jobs (running ones finish; waiting
    ones keep their attempts) until it is resumed."""
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.core.queues import pause_queue

    with command_engine(ctx) as engine, engine.begin() as conn:
        pause_queue(conn, name, actor=cli_actor(), reason=reason, now=db_now(conn))
    click.echo(
        f"queue {name} paused: no worker claims its jobs until `jobdesk queues resume {name}`"
    )


@queues.command("resume")
@click.argument("name")
@click.option("--reason", help="Why (kept in the audit log).")
@click.pass_context
@user_errors
def resume_(ctx: click.Context, name: str, reason: str | None) -> None:
    """Let workers claim queue NAME's jobs again."""
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.core.queues import resume_queue

    with command_engine(ctx) as engine, engine.begin() as conn:
        ended = resume_queue(conn, name, actor=cli_actor(), reason=reason, now=db_now(conn))
    click.echo(f"queue {name} resumed (it was paused by {ended.paused_by}: {ended.reason})")
