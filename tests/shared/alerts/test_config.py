"""Alert thresholds come from `JOBDESK_ALERT_<RULE>_<PARAM>`; mistakes are named."""

from __future__ import annotations

import pytest

from jobdesk.shared.settings import Settings, SettingsError
from jobdesk.shared.settings.alerts import AlertConfig, describe
from tests.factories import env_settings


def test_defaults_and_overrides_from_the_environment() -> None:
    settings = Settings.from_env(
        {
            "JOBDESK_ALERT_DEAD_LETTER_SPIKE_MIN_COUNT": "20",
            "JOBDESK_ALERT_REPEATED_ERROR_ENABLED": "off",
            "JOBDESK_ALERT_EMAIL": "oncall@example.com",
            "JOBDESK_ALERT_WEBHOOK_ENDPOINT": "pager",
            "JOBDESK_ALERT_INTERVAL_SECONDS": "15",
            "JOBDESK_HEARTBEAT_SECONDS": "2",
        }
    )
    config = AlertConfig.from_settings(settings)
    assert config.dead_letter_spike.min_count == 20
    assert config.dead_letter_spike.window_minutes == 15
    assert config.repeated_error.enabled is False
    assert config.queue_stalled.max_age_seconds == 600
    assert config.email == "oncall@example.com"
    assert config.webhook_endpoint == "pager"
    assert config.interval_seconds == 15
    assert config.heartbeat_seconds == 2


MIN_COUNT = "JOBDESK_ALERT_DEAD_LETTER_SPIKE_MIN_COUNT"


@pytest.mark.parametrize(
    ("key", "raw", "message"),
    [
        (
            "alert_dead_letter_spike_mincount",
            "3",
            "did you mean JOBDESK_ALERT_DEAD_LETTER_SPIKE_MIN_COUNT",
        ),
        (
            "alert_dead_leter_spike_min_count",
            "3",
            "did you mean JOBDESK_ALERT_DEAD_LETTER_SPIKE_MIN_COUNT",
        ),
        ("alert_queue_stalled_max_age_seconds", "ten", "expected a number"),
        ("alert_queue_stalled_max_age_seconds", "-1", ">= 0"),
        ("alert_repeated_error_window_minutes", "0", "must be > 0"),
        ("alert_breaker_open_enabled", "maybe", "expected one of"),
        ("alert_email", "not an address", "expected an email address"),
        ("alert_interval_seconds", "0", "must be > 0"),
    ],
)
def test_bad_values_name_the_variable(key: str, raw: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message) as info:
        env_settings({key: raw})
    assert f"JOBDESK_{key.upper()}" in str(info.value)


def test_describe_lists_every_rule_with_env_names() -> None:
    rows = describe(AlertConfig())
    assert [r["rule"] for r in rows] == [
        "dead_letter_spike",
        "repeated_error",
        "queue_stalled",
        "no_consumer",
        "breaker_open",
        "endpoint_paused",
        "schedule_failed",
    ]
    spike = rows[0]["params"]
    assert spike["min_count"] == {"value": 5, "env": "JOBDESK_ALERT_DEAD_LETTER_SPIKE_MIN_COUNT"}
