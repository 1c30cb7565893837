"""The maintenance tasks the leader's scheduler runs, and what they act for.

Each task is a `MaintenanceTask(name, interval_seconds, run)`: `interval_seconds` reads
its period from `Settings`; `run(context, now)` does one idempotent pass (its own
transactions; running twice, or on two leaders during a hand-over, is harmless) and may
raise — the scheduler logs it and tries again next tick, so a database outage never
crash-loops the worker.

`MaintenanceContext` carries everything a task acts for — the engine, the settings,
the retry policies of the job types this worker registered and its effective heartbeat
— so a runner built with its own registry rescues jobs with its own policies, and two
runners in one process never share state. `default_tasks()` builds a fresh set per
scheduler (the reaper keeps per-process contact state).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from jobdesk.shared.core.retry import RetryPolicy
from jobdesk.shared.settings import Settings
from jobdesk.worker.maintenance import (
    alerter,
    counts_compactor,
    history_rollup,
    hold_expiry,
    periodic,
    pruner,
    redriver,
    worker_pruner,
)
from jobdesk.worker.maintenance.reaper import Reaper
from jobdesk.worker.maintenance.slot_refill import SlotRefiller
from jobdesk.worker.schedules import ScheduleSpec


@dataclass(frozen=True)
class MaintenanceContext:
    engine: sa.Engine
    settings: Settings
    #: The retry policy of each job type this worker registered (unknown: the default).
    policy_for: Callable[[str], RetryPolicy]
    #: How often this worker's heartbeats renew leases (at most a third of the lease).
    heartbeat_seconds: float
    #: The schedules this worker's code declares (stored at start by every worker).
    schedules: tuple[ScheduleSpec, ...] = ()


@dataclass(frozen=True)
class MaintenanceTask:
    name: str
    interval_seconds: Callable[[Settings], float]
    run: Callable[[MaintenanceContext, datetime], object]


def default_tasks() -> list[MaintenanceTask]:
    reaper, refiller = Reaper(), SlotRefiller()
    return [
        MaintenanceTask("reaper", reaper.interval_seconds, reaper.scheduled_run),
        MaintenanceTask(
            "worker_pruner",
            worker_pruner.interval_seconds,
            lambda ctx, now: worker_pruner.run_once(ctx.engine, now, ctx.settings),
        ),
        MaintenanceTask(
            "alerter",
            alerter.interval_seconds,
            lambda ctx, now: alerter.run_once(ctx.engine, now, ctx.settings),
        ),
        MaintenanceTask("periodic", periodic.interval_seconds, periodic.run_once),
        MaintenanceTask(
            "pruner",
            pruner.interval_seconds,
            lambda ctx, now: pruner.run_once(ctx.engine, now, ctx.settings),
        ),
        MaintenanceTask(
            "counts_compactor",
            counts_compactor.interval_seconds,
            lambda ctx, now: counts_compactor.run_once(ctx.engine, now, ctx.settings),
        ),
        MaintenanceTask(
            "hold_expiry",
            hold_expiry.interval_seconds,
            lambda ctx, now: hold_expiry.run_once(ctx.engine, now),
        ),
        MaintenanceTask(
            "slot_refill",
            refiller.interval_seconds,
            lambda ctx, now: refiller.run_once(ctx.engine, now),
        ),
        MaintenanceTask(
            "redriver",
            redriver.interval_seconds,
            lambda ctx, now: redriver.run_once(ctx.engine, now),
        ),
        MaintenanceTask(
            "history_rollup",
            history_rollup.interval_seconds,
            lambda ctx, now: history_rollup.run_once(ctx.engine, now),
        ),
    ]
