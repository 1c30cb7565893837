"""`jobdesk endpoints …`: webhook endpoints from the terminal (add, list, pause, resume,
rotate). Secrets are printed once, as the last line, and never again."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import click

from jobdesk.cli.app import cli, cli_actor, command_engine, echo_json, user_errors


@cli.group()
def endpoints() -> None:
    """Webhook endpoints: add, list, pause, resume, rotate the signing secret."""


@endpoints.command("add")
@click.argument("name")
@click.argument("url")
@click.pass_context
@user_errors
def add(ctx: click.Context, name: str, url: str) -> None:
    """Create endpoint NAME for URL; prints the signing secret once (last line)."""
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.settings import Settings
    from jobdesk.shared.webhooks.endpoints import add_endpoint

    settings = Settings.from_env()
    with command_engine(ctx) as engine, engine.begin() as conn:
        secret = add_endpoint(
            conn,
            name,
            url,
            allow_private=settings.allow_private_webhook_targets,
            now=db_now(conn),
            actor=cli_actor(),
        )
    click.echo(f"endpoint {name} created for {url}")
    click.echo("signing secret (shown once; receivers verify webhook-signature with it):")
    click.echo(secret)


@endpoints.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
@user_errors
def list_(ctx: click.Context, as_json: bool) -> None:
    """List endpoints with their pause state (never the secrets)."""
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.limits.breakers import breaker_state
    from jobdesk.shared.webhooks.endpoints import list_endpoints

    rows: list[dict[str, Any]] = []
    with command_engine(ctx, sqlite_begin="DEFERRED") as engine, engine.connect() as conn:
        now = db_now(conn)
        for endpoint in list_endpoints(conn):
            row = endpoint.public(now)
            row["circuit"] = breaker_state(conn, f"webhook:{endpoint.name}", now).state
            rows.append(row)
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("(no endpoints)")
        return
    for row in rows:
        state = "paused" if row["paused"] else "active"
        if row["paused"] and row["paused_until"]:
            state += f" until {row['paused_until']:%Y-%m-%d %H:%M:%SZ}"
        note = f"  ({row['paused_reason']})" if row["paused"] and row["paused_reason"] else ""
        click.echo(f"{row['name']:<20} {state:<32} circuit={row['circuit']:<9} {row['url']}{note}")


@endpoints.command("pause")
@click.argument("name")
@click.option("--reason", required=True, help="Why (required, shown to everyone).")
@click.option("--for", "for_seconds", type=float, help="Resume automatically after N seconds.")
@click.pass_context
@user_errors
def pause(ctx: click.Context, name: str, reason: str, for_seconds: float | None) -> None:
    """Hold NAME's deliveries; its jobs wait without using attempts."""
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.webhooks.endpoints import pause_endpoint

    if for_seconds is not None and not 0 < for_seconds <= 366 * 86400:
        raise click.BadParameter("must be between 0 and 366 days", param_hint="--for")
    with command_engine(ctx) as engine, engine.begin() as conn:
        now = db_now(conn)
        until = now + timedelta(seconds=for_seconds) if for_seconds else None
        pause_endpoint(conn, name, actor=cli_actor(), reason=reason, until=until, now=now)
    click.echo(f"endpoint {name} paused" + (f" until {until:%Y-%m-%d %H:%M:%SZ}" if until else ""))


@endpoints.command("resume")
@click.argument("name")
@click.option("--reason", help="Why (kept in the audit log).")
@click.pass_context
@user_errors
def resume(ctx: click.Context, name: str, reason: str | None) -> None:
    """Resume NAME and release its held jobs."""
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.webhooks.endpoints import resume_endpoint

    with command_engine(ctx) as engine, engine.begin() as conn:
        released = resume_endpoint(conn, name, actor=cli_actor(), now=db_now(conn), reason=reason)
    click.echo(f"endpoint {name} resumed; {released} held job(s) released")


@endpoints.command("rotate")
@click.argument("name")
@click.option(
    "--overlap-hours",
    type=float,
    default=24.0,
    show_default=True,
    help="How long the old secret keeps signing too (two signatures).",
)
@click.pass_context
@user_errors
def rotate(ctx: click.Context, name: str, overlap_hours: float) -> None:
    """Give NAME a new signing secret; prints it once (last line)."""
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.webhooks.endpoints import rotate_secret

    if not 0 <= overlap_hours <= 24 * 30:
        raise click.BadParameter("must be between 0 and 720", param_hint="--overlap-hours")
    with command_engine(ctx) as engine, engine.begin() as conn:
        secret = rotate_secret(
            conn,
            name,
            overlap=timedelta(hours=overlap_hours),
            now=db_now(conn),
            actor=cli_actor(),
        )
    click.echo(f"endpoint {name}: new secret; the old one also signs for {overlap_hours:g} h:")
    click.echo(secret)
