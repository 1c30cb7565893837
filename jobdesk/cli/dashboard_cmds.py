"""`jobdesk dashboard`, `jobdesk users …` and `jobdesk dead …`: serving the dashboard,
managing its accounts, and triaging dead letters from a terminal."""

from __future__ import annotations

import ipaddress
import secrets
from dataclasses import replace
from typing import Any

import click

from jobdesk.cli.app import (
    cli,
    cli_actor,
    command_engine,
    echo_json,
    limit_option,
    read_secret,
    user_errors,
)

ROLE_CHOICE = click.Choice(["viewer", "operator", "admin"])


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    default=8000,
    show_default=True,
    type=click.IntRange(1, 65535),
    help="TCP port to serve the dashboard on (at --host); refused at once when taken.",
)
@click.option(
    "--dev",
    is_flag=True,
    help="Local development: use a throwaway secret key when JOBDESK_SECRET_KEY is unset "
    "(sessions end when the process stops). Loopback only.",
)
@click.option(
    "--debug",
    is_flag=True,
    help="Werkzeug debugger and tracebacks (loopback only, never in production).",
)
@click.pass_context
@user_errors
def dashboard(ctx: click.Context, host: str, port: int, dev: bool, debug: bool) -> None:
    """Serve the operator dashboard with the built-in server (local use).

    In production run `gunicorn -c deploy/gunicorn.conf.py 'jobdesk.dashboard:create_app()'`.
    The dashboard refuses to start without JOBDESK_SECRET_KEY (at least 32 random
    characters) unless --dev is given on a loopback address.
    """
    from jobdesk.dashboard import create_app
    from jobdesk.dashboard.app import SecretKeyError
    from jobdesk.shared.settings import Settings

    loopback = _is_loopback(host)
    if debug and not loopback:
        raise click.UsageError(
            "--debug exposes an interactive debugger that runs code: only on 127.0.0.1/::1"
        )
    if dev and not loopback:
        raise click.UsageError("--dev uses a throwaway secret key: only on 127.0.0.1/::1")
    settings = Settings.from_env()
    url = (ctx.find_root().obj or {}).get("database_url")
    if url:
        settings = replace(settings, database_url=url)
    throwaway = dev and not settings.secret_key
    if throwaway:
        settings = replace(settings, secret_key=secrets.token_urlsafe(48))
    try:
        app = create_app(settings)
    except SecretKeyError as exc:
        raise click.ClickException(str(exc)) from None
    # Bound before anything is printed: a taken port is one line, not a banner and then
    # the server's own complaint.
    server = _bind(host, port, app, debug=debug)
    problem = _database_problem(app)
    if problem is not None:
        click.echo(f"{problem} (until then every page answers 503)", err=True)
    if throwaway:
        click.echo("--dev: using a throwaway secret key; sessions end when this process stops.")
    if not loopback:
        click.echo(
            f"warning: listening on {host}; put it behind a TLS reverse proxy and prefer "
            "gunicorn (deploy/gunicorn.conf.py) outside development.",
            err=True,
        )
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"Jobdesk dashboard on http://{shown}:{port}/  (Ctrl+C to stop)")
    server.serve_forever()  # returns on Ctrl+C and closes the socket


def _database_problem(app: Any) -> str | None:
    """What keeps the dashboard from working on its database right now, said once at
    start (the pages and /readyz say it too): no schema, a schema behind this version,
    or no database at all. The server starts anyway and recovers without a restart."""
    import sqlalchemy as sa

    from jobdesk.dashboard.state import EXTENSION_KEY
    from jobdesk.shared.core.errors import with_pooler_hint
    from jobdesk.shared.migrate import schema_problem

    try:
        with app.extensions[EXTENSION_KEY].read_engine.connect() as conn:
            return schema_problem(conn)
    except sa.exc.OperationalError as exc:
        detail = str(exc.orig or exc).strip().splitlines()
        return f"database unavailable: {with_pooler_hint(detail[0] if detail else 'no answer')}"


def _bind(host: str, port: int, app: Any, *, debug: bool) -> Any:
    """A threaded Werkzeug server already listening on (host, port); a port that is
    taken or an address that cannot be used is a `ClickException` (one line)."""
    import errno
    import socket

    from werkzeug.serving import get_sockaddr, make_server, select_address_family

    if debug:
        from werkzeug.debug import DebuggedApplication

        app = DebuggedApplication(app, evalex=True)
        app.trusted_hosts.append(host)
    family = select_address_family(host, port)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(get_sockaddr(host, port, family))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        why = (
            "the port is in use (stop the other program or pass another --port)"
            if exc.errno == errno.EADDRINUSE
            else (exc.strerror or str(exc))
        )
        raise click.ClickException(f"cannot listen on {host}:{port}: {why}") from None
    with sock:
        # Werkzeug serves a duplicate of the bound socket.
        return make_server(host, port, app, threaded=True, fd=sock.fileno())


# --- users -------------------------------------------------------------------------------


@cli.group()
def users() -> None:
    """Dashboard accounts (roles: viewer, operator, admin)."""


@users.command("add")
@click.argument("name")
@click.option("--role", type=ROLE_CHOICE, required=True, help="What the account may do.")
@click.pass_context
@user_errors
def users_add(ctx: click.Context, name: str, role: str) -> None:
    """Create account NAME; the password is read from stdin or a hidden prompt."""
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.operator.commands.accounts import add_operator, check_username
    from jobdesk.shared.operator.passwords import check_password

    check_username(name)
    password = check_password(read_secret(f"Password for {name}"), username=name)
    with command_engine(ctx) as engine, engine.begin() as conn:
        account = add_operator(conn, name, password, role, now=db_now(conn), actor=cli_actor())
    click.echo(f"added {account.username} ({account.role})")


@users.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
@user_errors
def users_list(ctx: click.Context, as_json: bool) -> None:
    """List accounts with their role and last login."""
    from jobdesk.shared.operator.commands.accounts import list_operators

    with command_engine(ctx, sqlite_begin="DEFERRED") as engine, engine.connect() as conn:
        accounts = list_operators(conn)
    if as_json:
        echo_json(
            [
                {
                    "username": a.username,
                    "role": a.role,
                    "disabled": a.disabled,
                    "created_at": a.created_at,
                    "last_login_at": a.last_login_at,
                }
                for a in accounts
            ]
        )
        return
    if not accounts:
        click.echo("no accounts; create one with `jobdesk users add NAME --role admin`")
        return
    for a in accounts:
        state = "disabled" if a.disabled else "active"
        last = a.last_login_at.strftime("%Y-%m-%d %H:%M UTC") if a.last_login_at else "never"
        click.echo(f"{a.username:<24} {a.role:<9} {state:<9} last login {last}")


def _set_disabled(ctx: click.Context, name: str, disabled: bool) -> None:
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.operator.commands.accounts import set_disabled

    with command_engine(ctx) as engine, engine.begin() as conn:
        set_disabled(conn, name, disabled, now=db_now(conn), actor=cli_actor())
    click.echo(f"{'disabled' if disabled else 'enabled'} {name}")


@users.command("disable")
@click.argument("name")
@click.pass_context
@user_errors
def users_disable(ctx: click.Context, name: str) -> None:
    """Disable NAME: its open sessions end at their next request."""
    _set_disabled(ctx, name, True)


@users.command("enable")
@click.argument("name")
@click.pass_context
@user_errors
def users_enable(ctx: click.Context, name: str) -> None:
    """Re-enable NAME."""
    _set_disabled(ctx, name, False)


@users.command("role")
@click.argument("name")
@click.argument("role", type=ROLE_CHOICE)
@click.pass_context
@user_errors
def users_role(ctx: click.Context, name: str, role: str) -> None:
    """Give NAME another role; it applies from the account's next request."""
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.operator.commands.accounts import set_role

    with command_engine(ctx) as engine, engine.begin() as conn:
        account = set_role(conn, name, role, now=db_now(conn), actor=cli_actor())
    click.echo(f"{account.username} is now {account.role}")


@users.command("passwd")
@click.argument("name")
@click.pass_context
@user_errors
def users_passwd(ctx: click.Context, name: str) -> None:
    """Set a new password for NAME (stdin or prompt); its other sessions end."""
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.operator.commands.accounts import set_password
    from jobdesk.shared.operator.passwords import check_password

    password = check_password(read_secret(f"New password for {name}"), username=name)
    with command_engine(ctx) as engine, engine.begin() as conn:
        set_password(conn, name, password, now=db_now(conn), actor=cli_actor())
    click.echo(f"password changed for {name}")


# --- dead letters ------------------------------------------------------------------------


def _filter_options(func: Any) -> Any:
    options = [
        click.option("--type", "job_type", help="Job type, e.g. webhook.deliver."),
        click.option("--queue", help="Queue name."),
        click.option("--error", help="Text the error contains (current or past attempts)."),
        click.option("--fingerprint", help="Error group (16 hex digits, from `dead list`)."),
        click.option(
            "--range",
            "time_range",
            type=click.Choice(["1h", "24h", "7d", "30d"]),
            help="Went dead within this window.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _filters(**options: Any) -> Any:
    from jobdesk.shared.operator.filters import JobFilters

    args = {
        "type": options.get("job_type"),
        "queue": options.get("queue"),
        "error": options.get("error"),
        "fingerprint": options.get("fingerprint"),
        "range": options.get("time_range"),
    }
    if args["range"]:
        args["time"] = "finished"
    return JobFilters.from_args({k: v for k, v in args.items() if v})


@cli.group()
def dead() -> None:
    """Dead letters: list them, retry them as new jobs, or ignore them with a reason."""


@dead.command("list")
@_filter_options
@click.option("--groups", is_flag=True, help="Group by error fingerprint instead of listing jobs.")
@limit_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
@user_errors
def dead_list(
    ctx: click.Context, /, groups: bool, limit: int, as_json: bool, **options: Any
) -> None:
    """Dead jobs that still need a decision (newest first), or their error groups."""
    from dataclasses import asdict

    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.operator.queries.dead_letters import dead_groups
    from jobdesk.shared.operator.queries.jobs import list_jobs

    filters = replace(_filters(**options).dead_unresolved(), page_size=limit)
    with command_engine(ctx, sqlite_begin="DEFERRED") as engine, engine.connect() as conn:
        now = db_now(conn)
        if groups:
            found = dead_groups(conn, filters, now=now, limit=limit)
            if as_json:
                echo_json([asdict(g) for g in found.groups])
                return
            click.echo(f"{found.total_jobs} dead jobs in {found.total_groups} error groups")
            for g in found.groups:
                types = ", ".join(f"{t} {n}" for t, n in g.types.items())
                sample = (g.sample_error or "").splitlines()[0][:100] if g.sample_error else ""
                click.echo(f"{g.fingerprint or '-':<16} {g.count:>7}  {types}\n    {sample}")
            return
        page = list_jobs(conn, filters, now=now)
    items = page.items
    if as_json:
        echo_json([asdict(item) for item in items])
        return
    if not items:
        click.echo("no dead job needs a decision")
        return
    for job in items:
        error = (job.error_excerpt or "").splitlines()[0][:90] if job.error_excerpt else ""
        click.echo(f"#{job.id:<8} {job.job_type:<20} {job.queue:<12} {error}")


def _selection(ids: tuple[int, ...], all_matching: bool, options: dict[str, Any]) -> Any:
    from jobdesk.shared.operator.commands.triage import Selection

    if ids and all_matching:
        raise click.UsageError("give job ids or --all-matching, not both")
    if not ids and not all_matching:
        raise click.UsageError("give one or more job ids, or --all-matching with filters")
    if all_matching:
        filters = _filters(**options)
        if filters.is_empty:
            raise click.UsageError("--all-matching needs at least one filter (e.g. --type)")
        return Selection(filters=filters)
    return Selection(ids=tuple(dict.fromkeys(ids)))


def _run_bulk(
    ctx: click.Context, action: str, selection: Any, reason: str | None, actor: str, yes: bool
) -> None:
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.operator.commands.triage import (
        Selection,
        bulk_ignore,
        bulk_retry,
        preview_bulk,
    )

    with command_engine(ctx) as engine, engine.connect() as conn:
        impact = preview_bulk(conn, selection, now=db_now(conn))
        conn.rollback()
    if impact.selected == 0:
        click.echo("nothing to do: no selected job still needs a decision")
        return
    types = ", ".join(f"{t} {n}" for t, n in impact.types.items())
    click.echo(f"{action} {impact.selected} of {impact.matching} matching dead jobs ({types})")
    if impact.capped:
        click.echo(f"capped at {impact.cap} per action (one transaction); run again for the rest")
    if action == "retry" and impact.paused_endpoint:
        click.echo(f"{impact.paused_endpoint} target a paused endpoint and will wait for it")
    if action == "retry" and impact.unknown_types:
        click.echo(f"skipping unknown types: {', '.join(impact.unknown_types)}")
    if not yes and not click.confirm("Proceed?", default=False):
        raise click.ClickException("cancelled; nothing changed")
    if selection.filters is not None and impact.id_range is not None:
        selection = Selection(filters=selection.filters, id_range=impact.id_range)
    with command_engine(ctx) as engine, engine.begin() as conn:
        run = bulk_retry if action == "retry" else bulk_ignore
        result = run(conn, selection, actor=actor, reason=reason, now=db_now(conn))
    verb = "requeued" if action == "retry" else "ignored"
    click.echo(
        f"{verb} {result.done}; already resolved {result.already_resolved}; "
        f"unknown type {result.unknown_type}"
    )


@dead.command("retry")
@click.argument("ids", nargs=-1, type=click.IntRange(min=1))
@click.option("--all-matching", is_flag=True, help="Every dead job matching the filters.")
@_filter_options
@click.option("--reason", help="Why (kept in the audit log).")
@click.option(
    "--actor",
    default=cli_actor,
    show_default="cli:$USER",
    help="Who the audit log records as having done it.",
)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
@user_errors
def dead_retry(
    ctx: click.Context,
    /,
    ids: tuple[int, ...],
    all_matching: bool,
    reason: str | None,
    actor: str,
    yes: bool,
    **options: Any,
) -> None:
    """Retry dead jobs as new jobs (the dead ones stay, marked requeued)."""
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.operator.commands.triage import retry_dead

    selection = _selection(ids, all_matching, options)
    if len(selection.ids) == 1:
        with command_engine(ctx) as engine, engine.begin() as conn:
            new_id = retry_dead(conn, ids[0], actor=actor, reason=reason, now=db_now(conn))
        click.echo(f"requeued #{ids[0]} as #{new_id}")
        return
    _run_bulk(ctx, "retry", selection, reason, actor, yes)


@dead.command("ignore")
@click.argument("ids", nargs=-1, type=click.IntRange(min=1))
@click.option("--all-matching", is_flag=True, help="Every dead job matching the filters.")
@_filter_options
@click.option("--reason", required=True, help="Why (required, kept with the job).")
@click.option(
    "--actor",
    default=cli_actor,
    show_default="cli:$USER",
    help="Who the audit log records as having done it.",
)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
@user_errors
def dead_ignore(
    ctx: click.Context,
    /,
    ids: tuple[int, ...],
    all_matching: bool,
    reason: str,
    actor: str,
    yes: bool,
    **options: Any,
) -> None:
    """Ignore dead jobs with a reason: nothing runs again, the jobs stay findable."""
    from jobdesk.shared.core.clock import db_now
    from jobdesk.shared.operator.commands.triage import check_reason, ignore_dead

    check_reason(reason, required=True)
    selection = _selection(ids, all_matching, options)
    if len(selection.ids) == 1:
        with command_engine(ctx) as engine, engine.begin() as conn:
            ignore_dead(conn, ids[0], actor=actor, reason=reason, now=db_now(conn))
        click.echo(f"ignored #{ids[0]}")
        return
    _run_bulk(ctx, "ignore", selection, reason, actor, yes)
