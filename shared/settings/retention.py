"""Retention settings: how long finished things are kept (`JOBDESK_RETENTION_<NAME>`).

Days accept fractions; `never`/`off` keeps forever. Unresolved dead letters are never
deleted, whatever the settings: a human has not decided yet. A job's effects-ledger rows
are kept exactly as long as the job; `effects_days` covers rows that belong to no job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobdesk.shared.settings.schema import setting

if TYPE_CHECKING:
    from jobdesk.shared.settings.model import Settings


@dataclass(frozen=True)
class RetentionPolicy:
    """How long finished things are kept; None = forever."""

    succeeded_days: float | None = setting(
        7.0, "succeeded jobs, by finish time", never=True, positive=True
    )
    cancelled_days: float | None = setting(30.0, "cancelled jobs", never=True, positive=True)
    resolved_dead_days: float | None = setting(
        90.0, "dead letters with a resolution, by resolution time", never=True, positive=True
    )
    reports: bool = setting(True, "delete report runs and files past their expiry")
    alerts_days: float | None = setting(
        None, "resolved alerts", never=True, positive=True, shown_default="never"
    )
    audit_days: float | None = setting(
        None, "audit log entries", never=True, positive=True, shown_default="never"
    )
    #: A job's effects-ledger rows go with the job; this is for rows with no job to
    #: follow (recorded outside a job, or left by a job deleted by hand).
    effects_days: float | None = setting(
        30.0,
        "effects-ledger rows without a job (recorded outside one), by record time",
        never=True,
        positive=True,
    )
    batch_size: int = setting(1000, "rows per delete transaction", minimum=1)
    #: Per category and run; the rest waits for the next run so one run stays bounded.
    max_batches: int = setting(200, "batches per category and run", minimum=1)
    interval_seconds: float = setting(3600.0, "how often the pruner runs", positive=True)

    @classmethod
    def from_settings(cls, settings: Settings) -> RetentionPolicy:
        return settings.retention
