"""The alerter: evaluates every alert rule once and reconciles the `alerts` table.

Run by the maintenance leader every `JOBDESK_ALERT_INTERVAL_SECONDS` (default 60). Each
rule runs in its own transaction, so a rule that fails (and is logged) does not keep the
others from opening or resolving their alerts. Running it twice, or on two leaders at
once during a hand-over, is harmless: see `jobdesk.shared.alerts.store`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

import sqlalchemy as sa

from jobdesk.shared.alerts.rules import evaluate_rule
from jobdesk.shared.alerts.store import RuleOutcome, apply_findings
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.settings import Settings
from jobdesk.shared.settings.alerts import RULE_TYPES, AlertConfig

log = logging.getLogger("jobdesk.maintenance.alerter")


@dataclass
class AlertRunResult:
    """What one evaluation did, per rule; `errors` names rules that failed."""

    now: datetime
    rules: dict[str, RuleOutcome] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    def total(self, what: str) -> int:
        return sum(len(getattr(outcome, what)) for outcome in self.rules.values())

    @property
    def opened(self) -> int:
        return self.total("opened")

    @property
    def resolved(self) -> int:
        return self.total("resolved")

    @property
    def notification_jobs(self) -> list[int]:
        return [job for outcome in self.rules.values() for job in outcome.notification_jobs]


def interval_seconds(settings: Settings) -> float:
    return AlertConfig.from_settings(settings).interval_seconds


def run_once(engine: sa.Engine, now: datetime | None, settings: Settings) -> AlertRunResult:
    """Evaluate all rules at `now` (default: the database clock)."""
    config = AlertConfig.from_settings(settings)
    if now is None:
        with engine.connect() as conn:
            now = db_now(conn)
    result = AlertRunResult(now)
    for rule in RULE_TYPES:
        try:
            with engine.begin() as conn:
                findings = evaluate_rule(conn, rule, now, config)
                result.rules[rule] = apply_findings(conn, rule, findings, now=now, config=config)
        except sa.exc.SQLAlchemyError as exc:
            if isinstance(exc, sa.exc.OperationalError | sa.exc.InterfaceError):
                raise  # the database is down: the scheduler backs off, not this loop
            result.errors[rule] = str(exc).splitlines()[0]
            log.exception(
                "alert rule %s failed",
                rule,
                extra={"action": "alert_rule_failed", "rule": rule},
            )
    if result.opened or result.resolved:
        log.info(
            "alerts: %d opened, %d resolved, %d notification jobs",
            result.opened,
            result.resolved,
            len(result.notification_jobs),
            extra={"action": "alerts_evaluated"},
        )
    return result
