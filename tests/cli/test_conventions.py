"""The command line's conventions, checked on every command at once: what one command
does with `--reason`, `--limit` or its help texts, all of them do."""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from jobdesk.cli import cli
from jobdesk.cli.app import MAX_LIST_LIMIT


def commands(
    group: click.Group = cli, path: str = "jobdesk"
) -> Iterator[tuple[str, click.Command]]:
    yield path, group
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from commands(command, f"{path} {name}")
        else:
            yield f"{path} {name}", command


def option(command: click.Command, name: str) -> click.Option | None:
    for param in command.params:
        if isinstance(param, click.Option) and name in param.opts:
            return param
    return None


def test_every_pause_requires_a_reason_and_every_resume_takes_an_optional_one() -> None:
    """The dashboard's rule: a pause says why (the form's reason is required), a resume
    may (queues, schedules, endpoints alike)."""
    pauses = [(path, c) for path, c in commands() if path.endswith(" pause")]
    resumes = [(path, c) for path, c in commands() if path.endswith(" resume")]
    assert {p for p, _ in pauses} >= {
        "jobdesk endpoints pause",
        "jobdesk queues pause",
        "jobdesk schedules pause",
    }
    assert len(resumes) == len(pauses)
    for path, command in pauses:
        reason = option(command, "--reason")
        assert reason is not None, path
        assert reason.required, path
    for path, command in resumes:
        reason = option(command, "--reason")
        assert reason is not None, path
        assert not reason.required, path


def test_every_limit_has_the_same_maximum() -> None:
    limited = [(path, option(c, "--limit")) for path, c in commands() if option(c, "--limit")]
    assert {path for path, _ in limited} >= {"jobdesk dead list", "jobdesk alerts list"}
    for path, limit in limited:
        assert isinstance(limit, click.Option)
        assert isinstance(limit.type, click.IntRange), path
        assert (limit.type.min, limit.type.max) == (1, MAX_LIST_LIMIT), path


@pytest.mark.parametrize("path", ["jobdesk dead list", "jobdesk alerts list"])
def test_a_limit_past_the_maximum_is_refused_naming_the_range(path: str) -> None:
    args = [*path.split()[1:], "--limit", str(MAX_LIST_LIMIT + 1)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert f"1<=x<={MAX_LIST_LIMIT}" in result.output


def test_every_option_says_what_it_does() -> None:
    missing = [
        f"{path} {param.opts[0]}"
        for path, command in commands()
        for param in command.params
        if isinstance(param, click.Option) and not param.hidden and not (param.help or "").strip()
    ]
    assert missing == []


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["dashboard", "--help"], "TCP port to serve the dashboard on"),
        (["demo", "--help"], "Working directory of the demo"),
    ],
)
def test_help_texts_say_what_an_option_does(args: list[str], words: str) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0
    assert words in " ".join(result.output.split())


def test_every_command_is_in_the_readmes_table_of_commands() -> None:
    """Every top-level command has its row in the README's command line reference."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    table = readme.split("## Command line reference", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `jobdesk ")]
    documented = {row.split("`jobdesk ", 1)[1].split()[0].rstrip("`") for row in rows}
    assert set(cli.commands) - documented == set()
