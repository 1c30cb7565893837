"""Alert rules and their thresholds, read from `JOBDESK_ALERT_<RULE>_<PARAM>` variables.

Every rule has sensible defaults; any parameter can be overridden per rule, e.g.
`JOBDESK_ALERT_DEAD_LETTER_SPIKE_MIN_COUNT=20` or `JOBDESK_ALERT_QUEUE_STALLED_ENABLED=0`.
The variables arrive through `Settings.extra` (unknown `JOBDESK_*` keys), and parsing is
strict: a misspelt rule or parameter stops start-up with a message listing what exists,
because a silently ignored threshold is worse than none.

Delivery channels: `JOBDESK_ALERT_EMAIL` (an on-call address) and
`JOBDESK_ALERT_WEBHOOK_ENDPOINT` (the name of a configured webhook endpoint),
`JOBDESK_ALERT_DASHBOARD_URL` (the dashboard's public URL, for links in notifications)
and `JOBDESK_ALERT_INTERVAL_SECONDS` (how often the leader evaluates the rules).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from jobdesk.shared.settings import Settings, SettingsError, parse_bool, parse_seconds

# Rule names: stable strings stored in `alerts.rule` and used in env names.
DEAD_LETTER_SPIKE = "dead_letter_spike"
REPEATED_ERROR = "repeated_error"
QUEUE_STALLED = "queue_stalled"
NO_CONSUMER = "no_consumer"
BREAKER_OPEN = "breaker_open"
ENDPOINT_PAUSED = "endpoint_paused"


@dataclass(frozen=True)
class RuleConfig:
    """Parameters every rule has."""

    enabled: bool = True
    #: After a notification for (rule, subject), no new one for the same pair within this
    #: time, even when the alert resolves and fires again (flapping).
    cooldown_minutes: float = 30.0


@dataclass(frozen=True)
class DeadLetterSpike(RuleConfig):
    """Dead letters of one job type (per endpoint for webhooks) in the last window."""

    window_minutes: float = 15.0
    #: The trailing period before the window used as "normal" (scaled to the window).
    baseline_minutes: float = 24 * 60.0
    min_count: float = 5
    #: The window must also hold at least `factor` x the baseline rate.
    factor: float = 3.0


@dataclass(frozen=True)
class RepeatedError(RuleConfig):
    """The same error fingerprint across many distinct jobs within a window."""

    window_minutes: float = 15.0
    min_jobs: float = 10


@dataclass(frozen=True)
class QueueStalled(RuleConfig):
    """A queue whose oldest due job has waited too long."""

    max_age_seconds: float = 600.0


@dataclass(frozen=True)
class NoConsumer(RuleConfig):
    """Due jobs that no live worker serves (by queue or by job type)."""

    #: Jobs due for less than this are not reported (a worker may be restarting).
    min_age_seconds: float = 120.0
    #: A worker is live when seen within this many heartbeat intervals.
    live_heartbeats: float = 3.0


@dataclass(frozen=True)
class BreakerOpen(RuleConfig):
    """A circuit breaker open (or half-open) for longer than a threshold."""

    min_open_seconds: float = 600.0


@dataclass(frozen=True)
class EndpointPaused(RuleConfig):
    """A webhook endpoint paused for longer than a threshold (measured from its last
    change, `webhook_endpoints.updated_at`)."""

    min_paused_seconds: float = 3600.0
    cooldown_minutes: float = 24 * 60.0


RULE_TYPES: dict[str, type[RuleConfig]] = {
    DEAD_LETTER_SPIKE: DeadLetterSpike,
    REPEATED_ERROR: RepeatedError,
    QUEUE_STALLED: QueueStalled,
    NO_CONSUMER: NoConsumer,
    BREAKER_OPEN: BreakerOpen,
    ENDPOINT_PAUSED: EndpointPaused,
}

DEFAULT_INTERVAL_SECONDS = 60.0
_CHANNEL_KEYS = {
    "alert_email",
    "alert_webhook_endpoint",
    "alert_interval_seconds",
    "alert_dashboard_url",
}


@dataclass(frozen=True)
class AlertConfig:
    """All rules' parameters plus the delivery channels."""

    dead_letter_spike: DeadLetterSpike = field(default_factory=DeadLetterSpike)
    repeated_error: RepeatedError = field(default_factory=RepeatedError)
    queue_stalled: QueueStalled = field(default_factory=QueueStalled)
    no_consumer: NoConsumer = field(default_factory=NoConsumer)
    breaker_open: BreakerOpen = field(default_factory=BreakerOpen)
    endpoint_paused: EndpointPaused = field(default_factory=EndpointPaused)
    email: str | None = None
    webhook_endpoint: str | None = None
    #: The dashboard's public base URL, for links in notifications (optional).
    dashboard_url: str | None = None
    interval_seconds: float = DEFAULT_INTERVAL_SECONDS
    #: From `Settings.heartbeat_seconds`; used to decide which workers are live.
    heartbeat_seconds: float = 10.0

    def rule(self, name: str) -> RuleConfig:
        value: RuleConfig = getattr(self, name)
        return value

    @classmethod
    def from_settings(cls, settings: Settings) -> AlertConfig:
        return parse_alert_config(settings.extra, heartbeat_seconds=settings.heartbeat_seconds)


def env_name(rule: str, param: str) -> str:
    return f"JOBDESK_ALERT_{rule.upper()}_{param.upper()}"


def parse_alert_config(extra: Mapping[str, str], *, heartbeat_seconds: float = 10.0) -> AlertConfig:
    """Build the configuration from `Settings.extra` (lower-case keys without the prefix)."""
    overrides: dict[str, dict[str, Any]] = {name: {} for name in RULE_TYPES}
    channels: dict[str, Any] = {"heartbeat_seconds": heartbeat_seconds}
    for key, raw in extra.items():
        if not key.startswith("alert_"):
            continue
        if key in _CHANNEL_KEYS:
            channels.update(_parse_channel(key, raw))
            continue
        rule, param = _split_key(key)
        overrides[rule][param] = _parse_param(RULE_TYPES[rule], rule, param, raw)
    rules: dict[str, Any] = {
        name: replace(RULE_TYPES[name](), **values) for name, values in overrides.items()
    }
    return AlertConfig(**rules, **channels)


def _parse_channel(key: str, raw: str) -> dict[str, Any]:
    name = f"JOBDESK_{key.upper()}"
    if key == "alert_interval_seconds":
        value = parse_seconds(name, raw)
        if value <= 0:
            raise SettingsError(f"{name}: must be > 0, got {raw!r}")
        return {"interval_seconds": value}
    value_text = raw.strip()
    if key == "alert_dashboard_url":
        if value_text and not value_text.startswith(("http://", "https://")):
            raise SettingsError(f"{name}: expected an http(s) URL, got {raw!r}")
        return {"dashboard_url": value_text.rstrip("/") or None}
    if key == "alert_email":
        if value_text and ("@" not in value_text or any(c.isspace() for c in value_text)):
            raise SettingsError(f"{name}: expected an email address, got {raw!r}")
        return {"email": value_text or None}
    return {"webhook_endpoint": value_text or None}


def _split_key(key: str) -> tuple[str, str]:
    rest = key[len("alert_") :]
    for rule in sorted(RULE_TYPES, key=len, reverse=True):
        if rest.startswith(rule + "_"):
            param = rest[len(rule) + 1 :]
            known = {f.name for f in fields(RULE_TYPES[rule])}
            if param in known:
                return rule, param
            raise SettingsError(
                f"JOBDESK_{key.upper()}: unknown parameter {param!r} for rule {rule}; "
                f"known: {', '.join(sorted(p.upper() for p in known))}"
            )
    raise SettingsError(
        f"JOBDESK_{key.upper()}: unknown alert setting; rules are "
        f"{', '.join(r.upper() for r in RULE_TYPES)}, channels are ALERT_EMAIL, "
        "ALERT_WEBHOOK_ENDPOINT, ALERT_DASHBOARD_URL, ALERT_INTERVAL_SECONDS"
    )


def _parse_param(rule_type: type[RuleConfig], rule: str, param: str, raw: str) -> Any:
    name = env_name(rule, param)
    if param == "enabled":
        return parse_bool(name, raw)
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}: expected a number, got {raw!r}") from None
    if not value >= 0 or value == float("inf"):
        raise SettingsError(f"{name}: expected a finite number >= 0, got {raw!r}")
    if param in ("window_minutes", "baseline_minutes", "live_heartbeats") and value == 0:
        raise SettingsError(f"{name}: must be > 0, got {raw!r}")
    return value


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
