"""`jobdesk holds …`: quarantine one tenant's jobs — by concurrency key, group key or
payload term — without pausing the queue, list the holds, release one."""

from __future__ import annotations

from typing import Any

import click

from jobdesk.cli.app import cli, cli_actor, command_engine, echo_json, user_errors


@cli.group()
def holds() -> None:
    """Quarantine holds: every job not yet running that matches waits (new ones too),
    using no attempts, until the hold is released."""


def _target(concurrency_key: str | None, group_key: str | None, payload: str | None) -> Any:
    from jobdesk.shared.flow.holds import HoldTarget

    given = [
        (match, value)
        for match, value in (
            ("concurrency_key", concurrency_key),
            ("group_key", group_key),
            ("payload", payload),
        )
        if value is not None
    ]
    if len(given) != 1:
        raise click.UsageError(
            "name what to hold: one of --concurrency-key, --group-key, --payload"
        )
    return HoldTarget.parse(*given[0])


def _row(hold: Any, *, at_least: bool = False) -> dict[str, Any]:
    return {
        "id": hold.id,
        "match": hold.target.match,
        "value": hold.target.value,
        "holds": hold.target.describe(),
        "reason": hold.reason,
        "by": hold.created_by,
        "since": hold.created_at.isoformat(),
        "until": hold.until.isoformat() if hold.until else None,
        "held": hold.held,
        "at_least": at_least,
        "released_at": hold.released_at.isoformat() if hold.released_at else None,
        "released_by": hold.released_by,
    }


@holds.command("add")
@click.option("--concurrency-key", help="Hold the jobs of this concurrency key (tenant:42).")
@click.option("--group-key", help="Hold the jobs of this group key.")
@click.option("--payload", help="Hold the jobs whose payload has this term (account_id=42).")
@click.option("--reason", required=True, help="Why (required; every held job shows it).")
@click.option("--for", "for_", help="Release it by itself after 30m, 2h, 3d….")
@click.option("--until", help="Release it by itself at this time (ISO 8601, UTC by default).")
@click.option("--dry-run", is_flag=True, help="Only say how many jobs it would hold now.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
@user_errors
def add_(
    ctx: click.Context,
    concurrency_key: str | None,
    group_key: str | None,
    payload: str | None,
    reason: str,
    for_: str | None,
    until: str | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Hold every waiting job that matches, and every matching job written later."""
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.flow.holds import parse_hold_end, place_hold, preview_hold

    target = _target(concurrency_key, group_key, payload)
    with command_engine(ctx) as engine, engine.begin() as conn:
        now = db_now(conn)
        end = parse_hold_end(for_text=for_, until_text=until, now=now)
        if dry_run:
            preview = preview_hold(conn, target)
            if as_json:
                echo_json(
                    {
                        "holds": target.describe(),
                        "would_hold": preview.count,
                        "at_least": preview.capped,
                        "sample": list(preview.sample),
                    }
                )
            else:
                click.echo(
                    f"would hold {preview.count_text()} jobs of {target.describe()} now "
                    "(and every matching job written until it is released)"
                )
            return
        placed = place_hold(conn, target, reason=reason, actor=cli_actor(), now=now, until=end)
    if as_json:
        echo_json(_row(placed))
        return
    ending = f" until {placed.until:%Y-%m-%d %H:%M} UTC" if placed.until else ""
    click.echo(
        f"hold #{placed.id} on {target.describe()}{ending}: {placed.held:,} jobs held now; "
        f"`jobdesk holds release {placed.id}` lets them go"
    )


@holds.command("list")
@click.option("--all", "everything", is_flag=True, help="Released holds too.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
@user_errors
def list_(ctx: click.Context, everything: bool, as_json: bool) -> None:
    """The holds, newest first (the active ones, then the released ones), with how many
    jobs each active one holds now."""
    from jobdesk.shared.operator.queries.holds import quarantines

    with command_engine(ctx, sqlite_begin="DEFERRED") as engine, engine.connect() as conn:
        rows = quarantines(conn, active=True)
        if everything:
            rows += quarantines(conn, active=False)
    if as_json:
        echo_json([_row(row.hold, at_least=row.capped) for row in rows])
        return
    if not rows:
        click.echo("no holds" if everything else "no active holds")
        return
    for row in rows:
        hold = row.hold
        state = (
            f"released {hold.released_at:%Y-%m-%d %H:%M} by {hold.released_by}"
            if hold.released_at
            else f"{row.count_text()} jobs held"
            + (f", until {hold.until:%Y-%m-%d %H:%M} UTC" if hold.until else "")
        )
        click.echo(f"#{hold.id}  {hold.target.describe()}  {state}")
        click.echo(
            f"    by {hold.created_by} since {hold.created_at:%Y-%m-%d %H:%M}: {hold.reason}"
        )


@holds.command("release")
@click.argument("hold_id", type=int)
@click.option("--reason", help="Why (kept in the audit log).")
@click.pass_context
@user_errors
def release_(ctx: click.Context, hold_id: int, reason: str | None) -> None:
    """Release hold HOLD_ID: its jobs go back in line at their own time."""
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.flow.holds import release_hold

    with command_engine(ctx) as engine, engine.begin() as conn:
        released = release_hold(conn, hold_id, actor=cli_actor(), now=db_now(conn), reason=reason)
    click.echo(f"hold #{hold_id} released: {released:,} jobs back in line")
