"""`jobdesk demo`: the whole sign-up story on this machine, no setup."""

from __future__ import annotations

from pathlib import Path

import click

from jobdesk.cli.app import cli, user_errors


@cli.command("demo")
@click.option(
    "--port",
    type=click.IntRange(1, 65534),
    default=8000,
    show_default=True,
    help="Dashboard port on 127.0.0.1 (the demo console takes the next one if free).",
)
@click.option(
    "--users",
    type=click.IntRange(1, 200),
    default=8,
    show_default=True,
    help="How many users sign up.",
)
@click.option(
    "--keep",
    is_flag=True,
    help="Continue with the previous demo's data instead of starting fresh.",
)
@click.option(
    "--postgres",
    "postgres_url",
    metavar="URL",
    help="Run the story on this PostgreSQL database (an empty one of its own, e.g. "
    "postgresql+psycopg://me@localhost/jobdesk_demo) instead of a SQLite file.",
)
@click.option(
    "--speed",
    type=click.FloatRange(0.1, 10.0),
    default=1.0,
    show_default=True,
    help="Play the story faster (2 = twice as fast) or slower (0.5).",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("jobdesk-demo"),
    show_default=True,
    help="Working directory of the demo, created if missing: its SQLite database (started "
    "afresh unless --keep), report files and the worker's and dashboard's logs. One demo "
    "at a time per directory.",
)
@user_errors
def demo(
    port: int,
    users: int,
    keep: bool,
    postgres_url: str | None,
    speed: float,
    directory: Path,
) -> None:
    """Play the sign-up story: users sign up (user row + welcome email + CRM webhook +
    nightly report row in one transaction each), the emails go out once, the CRM is
    down so its webhooks back off and go dead, the nightly report runs, alerts fire.

    Then triage it in the dashboard: search the error, bring the CRM back (a button on
    the demo console), retry the dead jobs and watch them succeed. Ctrl-C stops
    everything. The demo's retry schedule is seconds instead of hours, and its
    settings never touch your JOBDESK_* environment.
    """
    from jobdesk.demo.orchestrator import Demo, DemoError, DemoOptions

    options = DemoOptions(
        port=port,
        users=users,
        keep=keep,
        postgres_url=postgres_url,
        speed=speed,
        directory=directory,
    )
    try:
        code = Demo(options).run()
    except DemoError as exc:
        raise click.ClickException(str(exc)) from None
    if code:
        raise SystemExit(code)
