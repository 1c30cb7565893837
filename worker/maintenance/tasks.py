"""The maintenance task list the leader's scheduler runs.

Each task is a `MaintenanceTask(name, interval_seconds, run_once)`: `interval_seconds`
reads its period from `Settings`, `run_once(engine, now, settings)` does one idempotent
pass (its own transactions; running twice, or on two leaders during a hand-over, is
harmless) and may raise — the scheduler logs it and tries again next tick, so a
database outage never crash-loops the worker. Feature modules append their tasks to
`TASKS` at import time of this module's neighbours, or below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from jobdesk.shared.settings import Settings
from jobdesk.worker.maintenance import (
    alerter,
    counts_compactor,
    pruner,
    reaper,
    worker_pruner,
)


@dataclass(frozen=True)
class MaintenanceTask:
    name: str
    interval_seconds: Callable[[Settings], float]
    run_once: Callable[[sa.Engine, datetime, Settings], object]


TASKS: list[MaintenanceTask] = [
    MaintenanceTask("reaper", reaper.interval_seconds, reaper.scheduled_run),
    MaintenanceTask("worker_pruner", worker_pruner.interval_seconds, worker_pruner.run_once),
    MaintenanceTask("alerter", alerter.interval_seconds, alerter.run_once),
    MaintenanceTask("pruner", pruner.interval_seconds, pruner.run_once),
    MaintenanceTask(
        "counts_compactor", counts_compactor.interval_seconds, counts_compactor.run_once
    ),
]
