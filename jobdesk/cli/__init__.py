"""The `jobdesk` command line: the composition root.

This is the one place allowed to import all three packages (shared, worker, dashboard);
each command group lives in its own module and is registered below. Heavy imports
happen inside the commands so `jobdesk --help` stays fast.
"""

from __future__ import annotations

from jobdesk.cli import batches as _batches  # noqa: F401  (registers its commands)
from jobdesk.cli import check as _check  # noqa: F401  (registers its commands)
from jobdesk.cli import core as _core  # noqa: F401  (registers its commands)
from jobdesk.cli import dashboard_cmds as _dashboard  # noqa: F401  (registers its commands)
from jobdesk.cli import demo as _demo  # noqa: F401  (registers its commands)
from jobdesk.cli import endpoints as _endpoints  # noqa: F401  (registers its commands)
from jobdesk.cli import holds as _holds  # noqa: F401  (registers its commands)
from jobdesk.cli import jobs as _jobs  # noqa: F401  (registers its commands)
from jobdesk.cli import keys as _keys  # noqa: F401  (registers its commands)
from jobdesk.cli import queues as _queues  # noqa: F401  (registers its commands)
from jobdesk.cli import redrives as _redrives  # noqa: F401  (registers its commands)
from jobdesk.cli import run as _run  # noqa: F401  (registers its commands)
from jobdesk.cli import schedules as _schedules  # noqa: F401  (registers its commands)
from jobdesk.cli import types as _types  # noqa: F401  (registers its commands)
from jobdesk.cli.app import cli


def main() -> None:
    cli(prog_name="jobdesk")


__all__ = ["cli", "main"]
