"""The alert rules' settings: `JOBDESK_ALERT_<RULE>_<PARAM>` and the delivery channels.

Every rule has sensible defaults; any parameter can be overridden per rule, e.g.
`JOBDESK_ALERT_DEAD_LETTER_SPIKE_MIN_COUNT=20` or `JOBDESK_ALERT_QUEUE_STALLED_ENABLED=0`.
A misspelt rule or parameter stops start-up like any unknown `JOBDESK_*` name.

Channels: `JOBDESK_ALERT_EMAIL` (an on-call address), `JOBDESK_ALERT_WEBHOOK_ENDPOINT`
(the name of a configured webhook endpoint), `JOBDESK_ALERT_DASHBOARD_URL` (the
dashboard's public URL, for links in notifications) and `JOBDESK_ALERT_INTERVAL_SECONDS`
(how often the leader evaluates the rules).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from jobdesk.shared.settings.parsing import SettingsError
from jobdesk.shared.settings.schema import section, setting

if TYPE_CHECKING:
    from jobdesk.shared.settings.model import Settings

# Rule names: stable strings stored in `jobdesk_alerts.rule` and used in variable names.
DEAD_LETTER_SPIKE = "dead_letter_spike"
REPEATED_ERROR = "repeated_error"
QUEUE_STALLED = "queue_stalled"
NO_CONSUMER = "no_consumer"
BREAKER_OPEN = "breaker_open"
ENDPOINT_PAUSED = "endpoint_paused"
SCHEDULE_FAILED = "schedule_failed"

RULES_GROUP = "Alert rules"
ALERTS_GROUP = "Alerts"


@dataclass(frozen=True)
class RuleConfig:
    """Parameters every rule has."""

    enabled: bool = setting(True, "evaluate this rule")
    #: After a notification for (rule, subject), no new one for the same pair within this
    #: time, even when the alert resolves and fires again (flapping).
    cooldown_minutes: float = setting(
        30.0, "no second notification for the same subject within this time"
    )


@dataclass(frozen=True)
class DeadLetterSpike(RuleConfig):
    """Dead letters of one job type (per endpoint for webhooks) in the last window."""

    window_minutes: float = setting(15.0, "the window counted", positive=True)
    #: The trailing period before the window used as "normal" (scaled to the window).
    baseline_minutes: float = setting(
        24 * 60.0, "the trailing period taken as normal", positive=True
    )
    min_count: float = setting(5, "dead letters in the window needed to fire")
    #: The window must also hold at least `factor` x the baseline rate.
    factor: float = setting(3.0, "times the baseline rate needed to fire")


@dataclass(frozen=True)
class RepeatedError(RuleConfig):
    """The same error fingerprint across many distinct jobs within a window."""

    window_minutes: float = setting(15.0, "the window counted", positive=True)
    min_jobs: float = setting(10, "distinct jobs with the error needed to fire")


@dataclass(frozen=True)
class QueueStalled(RuleConfig):
    """A queue whose oldest due job has waited too long."""

    max_age_seconds: float = setting(600.0, "oldest due job's wait that fires")


@dataclass(frozen=True)
class NoConsumer(RuleConfig):
    """Due jobs that no live worker serves (by queue or by job type)."""

    #: Jobs due for less than this are not reported (a worker may be restarting).
    min_age_seconds: float = setting(120.0, "jobs due for less are not reported")
    #: A worker is live when seen within this many heartbeat intervals.
    live_heartbeats: float = setting(
        3.0, "a worker seen within this many heartbeats is live", positive=True
    )


@dataclass(frozen=True)
class BreakerOpen(RuleConfig):
    """A circuit breaker open (or half-open) for longer than a threshold."""

    min_open_seconds: float = setting(600.0, "open this long fires")


@dataclass(frozen=True)
class EndpointPaused(RuleConfig):
    """A webhook endpoint paused for longer than a threshold (measured from its last
    change, `jobdesk_webhook_endpoints.updated_at`)."""

    min_paused_seconds: float = setting(3600.0, "paused this long fires")
    cooldown_minutes: float = setting(
        24 * 60.0, "no second notification for the same endpoint within this time"
    )


@dataclass(frozen=True)
class ScheduleFailed(RuleConfig):
    """A schedule whose last run ended dead and still waits for a decision."""


RULE_TYPES: dict[str, type[RuleConfig]] = {
    DEAD_LETTER_SPIKE: DeadLetterSpike,
    REPEATED_ERROR: RepeatedError,
    QUEUE_STALLED: QueueStalled,
    NO_CONSUMER: NoConsumer,
    BREAKER_OPEN: BreakerOpen,
    ENDPOINT_PAUSED: EndpointPaused,
    SCHEDULE_FAILED: ScheduleFailed,
}

DEFAULT_INTERVAL_SECONDS = 60.0


def _check_email(name: str, value: str | None) -> None:
    if value and ("@" not in value or any(c.isspace() for c in value)):
        raise SettingsError(f"{name}: expected an email address, got {value!r}")


def _check_url(name: str, value: str | None) -> None:
    if value and not value.startswith(("http://", "https://")):
        raise SettingsError(f"{name}: expected an http(s) URL, got {value!r}")


@dataclass(frozen=True)
class AlertConfig:
    """All rules' parameters plus the delivery channels."""

    dead_letter_spike: DeadLetterSpike = section(DeadLetterSpike, DEAD_LETTER_SPIKE, RULES_GROUP)
    repeated_error: RepeatedError = section(RepeatedError, REPEATED_ERROR, RULES_GROUP)
    queue_stalled: QueueStalled = section(QueueStalled, QUEUE_STALLED, RULES_GROUP)
    no_consumer: NoConsumer = section(NoConsumer, NO_CONSUMER, RULES_GROUP)
    breaker_open: BreakerOpen = section(BreakerOpen, BREAKER_OPEN, RULES_GROUP)
    endpoint_paused: EndpointPaused = section(EndpointPaused, ENDPOINT_PAUSED, RULES_GROUP)
    schedule_failed: ScheduleFailed = section(ScheduleFailed, SCHEDULE_FAILED, RULES_GROUP)
    email: str | None = setting(
        None, "on-call address (sent as an `email.send` job)", check=_check_email
    )
    webhook_endpoint: str | None = setting(None, "name of a configured endpoint to notify")
    #: The dashboard's public base URL, for links in notifications (optional).
    dashboard_url: str | None = setting(
        None, "public dashboard URL for links in notifications", check=_check_url
    )
    interval_seconds: float = setting(
        DEFAULT_INTERVAL_SECONDS, "how often the leader evaluates the rules", positive=True
    )
    #: Not a variable: the worker heartbeat (`JOBDESK_HEARTBEAT_SECONDS`), used to decide
    #: which workers are live; `from_settings` fills it in.
    heartbeat_seconds: float = field(default=10.0)

    def __post_init__(self) -> None:
        if self.dashboard_url:
            object.__setattr__(self, "dashboard_url", self.dashboard_url.rstrip("/"))

    def rule(self, name: str) -> RuleConfig:
        value: RuleConfig = getattr(self, name)
        return value

    @classmethod
    def from_settings(cls, settings: Settings) -> AlertConfig:
        return replace(settings.alerts, heartbeat_seconds=settings.heartbeat_seconds)


def env_name(rule: str, param: str) -> str:
    return f"JOBDESK_ALERT_{rule.upper()}_{param.upper()}"


def describe(config: AlertConfig) -> list[dict[str, Any]]:
    """Each rule with its parameters and env names (for docs, the CLI and the dashboard)."""
    out: list[dict[str, Any]] = []
    for name in RULE_TYPES:
        rule = config.rule(name)
        params = {
            f.name: {"value": getattr(rule, f.name), "env": env_name(name, f.name)}
            for f in fields(rule)
        }
        doc = " ".join((type(rule).__doc__ or "").split())
        out.append({"rule": name, "description": doc, "params": params})
    return out
