"""An app's job module as the dashboard imports it through JOBDESK_JOB_MODULES: its
`@job(validate=…)` is what the fix form applies to `t.ticket` payloads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobdesk import ValidationError, job
from jobdesk.worker.registry import Registry


def _ticket_rules(payload: Mapping[str, Any]) -> list[ValidationError]:
    if payload.get("priority") not in {"low", "high"}:
        return [ValidationError("payload.priority", "must be low or high")]
    return []


@job("t.ticket", validate=_ticket_rules, target=Registry())
def ticket(payload: dict[str, Any], ctx: object) -> None:
    """Opens a ticket (never run by the dashboard)."""
