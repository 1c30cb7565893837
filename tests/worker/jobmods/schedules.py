"""Recurring test jobs for the schedule acceptance test (`--jobs …jobmods.schedules`)."""

from __future__ import annotations

from typing import Any

from jobdesk import job
from jobdesk.worker.context import JobContext


@job("t.every_slot", every=2, catch_up=True, queue="ticks")
def every_slot(payload: dict[str, Any], ctx: JobContext) -> None:
    """Every 2 s slot runs, missed ones too (catch_up)."""


@job("t.latest_slot", every=2, queue="ticks")
def latest_slot(payload: dict[str, Any], ctx: JobContext) -> None:
    """Every 2 s; after downtime only the latest missed slot."""
