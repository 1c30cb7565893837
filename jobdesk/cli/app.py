"""The root `jobdesk` click group and the helpers every command shares."""

from __future__ import annotations

import functools
import getpass
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

import click

P = ParamSpec("P")
T = TypeVar("T")


class WholeSentenceGroup(click.Group):
    """A group whose command list shows each command's first sentence whole (wrapped to
    the terminal) instead of cutting it off with "..." at the column width."""

    #: Subgroups (`jobdesk schedules …`) are of this class too.
    group_class = type

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is None or command.hidden:
                continue
            rows.append((name, command.get_short_help_str(limit=1000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(
    cls=WholeSentenceGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(package_name="jobdesk", prog_name="jobdesk")
@click.option(
    "--database-url",
    envvar="JOBDESK_DATABASE_URL",
    metavar="URL",
    help="Database to use (env JOBDESK_DATABASE_URL; default: sqlite:///jobdesk.db "
    "in the working directory).",
)
@click.pass_context
def cli(ctx: click.Context, database_url: str | None) -> None:
    """Jobdesk: a database-backed job queue with an operator dashboard."""
    ctx.ensure_object(dict)
    ctx.obj["database_url"] = database_url


@contextmanager
def command_engine(ctx: click.Context, **kwargs: Any) -> Iterator[Any]:
    """An engine for one command, disposed afterwards (no pooled connection left open)."""
    engine = engine_from(ctx, **kwargs)
    try:
        yield engine
    finally:
        engine.dispose()


def cli_actor() -> str:
    """Who an audited action from the terminal is recorded as (`cli:<login>`)."""
    try:
        return f"cli:{getpass.getuser()}"[:100]
    except (KeyError, OSError):
        return "cli"


def user_errors(func: Callable[P, T]) -> Callable[P, T]:
    """Turn the errors a user can cause into one clear line and exit status 1/2."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        import sqlalchemy as sa

        from jobdesk.shared.core.errors import JobdeskError, with_pooler_hint
        from jobdesk.shared.settings import SettingsError

        try:
            return func(*args, **kwargs)
        except (JobdeskError, SettingsError) as exc:
            raise click.ClickException(str(exc)) from None
        except sa.exc.OperationalError as exc:
            detail = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
            if "no such table" in detail:  # SQLite reports a missing schema this way
                raise click.ClickException(
                    f"database error: {detail} (run `jobdesk migrate` first)"
                ) from None
            raise click.ClickException(
                f"database unavailable: {with_pooler_hint(detail)}"
            ) from None
        except sa.exc.ProgrammingError as exc:
            detail = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
            if "does not exist" in detail or "no such table" in detail:
                detail += " (run `jobdesk migrate` first)"
            raise click.ClickException(f"database error: {detail}") from None

    return wrapper


def engine_from(ctx: click.Context, **kwargs: Any) -> Any:
    """Build the engine for the URL given on the command line or in the environment."""
    from jobdesk.shared.core.db import make_engine
    from jobdesk.shared.settings import Settings

    settings = Settings.from_env()
    url = (ctx.find_root().obj or {}).get("database_url") or settings.database_url
    return make_engine(url, settings=settings, **kwargs)


#: The most rows any `list` command prints at once (`--limit`): one bound for all of
#: them, the same as the largest bulk action, so a terminal never asks for more rows
#: than an operator can act on in one go.
MAX_LIST_LIMIT = 1000
DEFAULT_LIST_LIMIT = 50


def limit_option(func: Callable[P, T]) -> Callable[P, T]:
    """`--limit N` for a list command, bounded by `MAX_LIST_LIMIT`."""
    option = click.option(
        "--limit",
        type=click.IntRange(1, MAX_LIST_LIMIT),
        default=DEFAULT_LIST_LIMIT,
        show_default=True,
        help=f"Show at most N rows (1 to {MAX_LIST_LIMIT:,}).",
    )
    return option(func)


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def read_secret(prompt: str) -> str:
    """A password from stdin when piped, otherwise from a hidden prompt."""
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\n")
    return str(click.prompt(prompt, hide_input=True, confirmation_prompt=True))
