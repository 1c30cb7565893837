"""Settings: JOBDESK_* variables parsed strictly, with messages naming the variable."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from jobdesk.shared.settings import (
    DEFAULT_DATABASE_URL,
    KNOWN_ELSEWHERE,
    Rate,
    Settings,
    SettingsError,
    known_names,
    parse_bool,
    parse_seconds,
    settings_reference,
)
from jobdesk.shared.settings.schema import entries


def test_defaults_without_any_variable() -> None:
    settings = Settings.from_env({"PATH": "/bin", "OTHER_DATABASE_URL": "x"})
    assert settings == Settings()
    assert settings.database_url == DEFAULT_DATABASE_URL == "sqlite:///jobdesk.db"
    assert settings.lease_seconds == 30
    assert settings.reaper_interval_seconds == 10
    assert settings.max_payload_bytes == 256 * 1024
    assert settings.allow_private_webhook_targets is False


def test_variables_are_parsed_into_typed_fields() -> None:
    settings = Settings.from_env(
        {
            "JOBDESK_DATABASE_URL": "postgresql+psycopg://u@h/db",
            "JOBDESK_JOB_MODULES": "myapp.jobs, other.jobs ,",
            "JOBDESK_LEASE_SECONDS": "2.5",
            "JOBDESK_ALLOW_PRIVATE_WEBHOOK_TARGETS": "yes",
            "JOBDESK_MAX_PAYLOAD_BYTES": "4096",
            "JOBDESK_LOG_FORMAT": "JSON",
        }
    )
    assert settings.database_url == "postgresql+psycopg://u@h/db"
    assert settings.job_modules == ("myapp.jobs", "other.jobs")
    assert settings.lease_seconds == 2.5
    assert settings.allow_private_webhook_targets is True
    assert settings.max_payload_bytes == 4096
    assert settings.log_format == "json"


@pytest.mark.parametrize(
    ("raw", "value"),
    [(v, True) for v in ("1", "true", "YES", " on ")]
    + [(v, False) for v in ("0", "False", "no", "off")],
)
def test_booleans(raw: str, value: bool) -> None:
    assert parse_bool("JOBDESK_X", raw) is value


@pytest.mark.parametrize(
    ("variable", "raw", "message"),
    [
        ("JOBDESK_ALLOW_PRIVATE_WEBHOOK_TARGETS", "maybe", "expected one of 1/true/yes/on"),
        ("JOBDESK_LEASE_SECONDS", "thirty", "expected a number of seconds"),
        ("JOBDESK_LEASE_SECONDS", "-1", ">= 0"),
        ("JOBDESK_POLL_INTERVAL_SECONDS", "nan", ">= 0"),
        ("JOBDESK_REAPER_INTERVAL_SECONDS", "inf", "finite"),
        ("JOBDESK_MAX_PAYLOAD_BYTES", "10", "must be >= 1024"),
        ("JOBDESK_DB_POOL_SIZE", "ten", "whole number"),
        ("JOBDESK_LOG_FORMAT", "xml", "expected one of text, json"),
    ],
)
def test_bad_values_stop_start_up_naming_the_variable(
    variable: str, raw: str, message: str
) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({variable: raw})
    assert str(caught.value).startswith(variable)
    assert message in str(caught.value)


def test_fractional_seconds() -> None:
    assert parse_seconds("JOBDESK_X", "0.25") == 0.25


def test_settings_are_frozen_and_overridable() -> None:
    settings = Settings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.lease_seconds = 1  # type: ignore[misc]
    assert dataclasses.replace(settings, lease_seconds=5).lease_seconds == 5


@pytest.mark.parametrize(
    ("variable", "suggestion"),
    [
        ("JOBDESK_LEASE_SECOND", "JOBDESK_LEASE_SECONDS"),
        ("JOBDESK_DATABASE_URI", "JOBDESK_DATABASE_URL"),
        ("JOBDESK_ALERT_QUEUE_STALED_ENABLED", "JOBDESK_ALERT_QUEUE_STALLED_ENABLED"),
        ("JOBDESK_RETENTION_SUCCEDED_DAYS", "JOBDESK_RETENTION_SUCCEEDED_DAYS"),
        ("JOBDESK_SMTP_RATELIMIT", "JOBDESK_SMTP_RATE_LIMIT"),
    ],
)
def test_an_unknown_name_is_one_line_naming_the_closest_setting(
    variable: str, suggestion: str
) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({variable: "5"})
    message = str(caught.value)
    assert message == f"{variable} is not a Jobdesk setting; did you mean {suggestion}?"


def test_an_unknown_name_far_from_every_setting_points_at_the_reference() -> None:
    with pytest.raises(SettingsError, match="JOBDESK_XYZZY is not a Jobdesk setting; see"):
        Settings.from_env({"JOBDESK_XYZZY": "1"})


def test_names_read_by_the_test_suite_and_benchmarks_are_known() -> None:
    for name in KNOWN_ELSEWHERE:
        assert Settings.from_env({name: "x"}) == Settings()


def test_every_variable_has_a_unique_name_and_a_meaning() -> None:
    names = known_names()
    assert len(names) == len(set(names))
    assert all(name.startswith("JOBDESK_") and name == name.upper() for name in names)
    for entry in entries(Settings):
        assert entry.spec.doc, entry.name


def test_nested_sections_and_typed_values() -> None:
    settings = Settings.from_env(
        {
            "JOBDESK_ALERT_DEAD_LETTER_SPIKE_MIN_COUNT": "20",
            "JOBDESK_ALERT_DASHBOARD_URL": "https://jobs.example.com/",
            "JOBDESK_RETENTION_AUDIT_DAYS": "never",
            "JOBDESK_RETENTION_SUCCEEDED_DAYS": "1.5",
            "JOBDESK_SMTP_RATE_LIMIT": "600/m",
            "JOBDESK_WORKER_METRICS_PORT": "9100",
            "JOBDESK_TRUSTED_PROXY_DEFAULT_ROLE": "Viewer",
            "JOBDESK_EMAIL_TEMPLATES_DIR": "/srv/mail",
        }
    )
    assert settings.alerts.dead_letter_spike.min_count == 20
    assert settings.alerts.dead_letter_spike.window_minutes == 15
    assert settings.alerts.dashboard_url == "https://jobs.example.com"
    assert settings.retention.audit_days is None
    assert settings.retention.succeeded_days == 1.5
    assert settings.smtp_rate_limit == Rate(600, 60)
    assert settings.worker_metrics_port == 9100
    assert settings.trusted_proxy_default_role == "viewer"
    assert str(settings.email_templates_dir) == "/srv/mail"


@pytest.mark.parametrize(
    ("variable", "raw", "message"),
    [
        ("JOBDESK_SMTP_RATE_LIMIT", "ten a second", "expected N/s, N/m or N/h"),
        ("JOBDESK_WEBHOOK_RATE_LIMIT", "0/s", "must be a finite number > 0"),
        ("JOBDESK_WORKER_METRICS_PORT", "70000", "must be <= 65535"),
        ("JOBDESK_CONCURRENCY", "0", "must be >= 1"),
        ("JOBDESK_TRUSTED_PROXY_DEFAULT_ROLE", "root", "expected one of viewer, operator, admin"),
        ("JOBDESK_HEARTBEAT_SECONDS", "0", "must be > 0"),
        ("JOBDESK_ALERT_EMAIL", "nobody", "expected an email address"),
    ],
)
def test_more_bad_values_name_the_variable(variable: str, raw: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message) as caught:
        Settings.from_env({variable: raw})
    assert str(caught.value).startswith(variable)


README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_settings_reference_is_generated_from_the_schema() -> None:
    text = README.read_text(encoding="utf-8")
    begin, end = "<!-- settings:begin -->\n", "<!-- settings:end -->"
    assert begin in text, "README lost its settings markers"
    assert end in text, "README lost its settings markers"
    shown = text.split(begin, 1)[1].split(end, 1)[0].strip()
    assert shown == settings_reference().strip(), (
        "README settings reference is stale: paste the output of `jobdesk settings --markdown`"
    )


def test_the_proxy_default_role_choices_are_the_dashboard_roles() -> None:
    from jobdesk.shared.operator.models import Role
    from jobdesk.shared.settings.model import ROLES

    assert tuple(Role) == ROLES
