"""The `jobdesk` command line: the composition root.

This is the one place allowed to import all three packages (shared, worker, dashboard);
each command group lives in its own module and is registered below. Heavy imports
happen inside the commands so `jobdesk --help` stays fast.
"""

from __future__ import annotations

from worker.cli import check as _check  # noqa: F401  (registers check / alerts)
from worker.cli import core as _core  # noqa: F401  (registers migrate / enqueue / stats)
from worker.cli import dashboard_cmds as _dashboard  # noqa: F401  (dashboard / users / dead)
from worker.cli import demo as _demo  # noqa: F401  (registers demo)
from worker.cli import endpoints as _endpoints  # noqa: F401  (registers endpoints …)
from worker.cli import run as _run  # noqa: F401  (registers worker)
from worker.cli.app import cli


def main() -> None:
    cli(prog_name="jobdesk")


__all__ = ["cli", "main"]
