"""Settings: JOBDESK_* variables parsed strictly, with messages naming the variable."""

from __future__ import annotations

import dataclasses

import pytest

from jobdesk.shared.settings import (
    DEFAULT_DATABASE_URL,
    Settings,
    SettingsError,
    parse_bool,
    parse_seconds,
)


def test_defaults_without_any_variable() -> None:
    settings = Settings.from_env({"PATH": "/bin", "OTHER_DATABASE_URL": "x"})
    assert settings == Settings()
    assert settings.database_url == DEFAULT_DATABASE_URL == "sqlite:///jobdesk.db"
    assert settings.lease_seconds == 30
    assert settings.reaper_interval_seconds == 10
    assert settings.max_payload_bytes == 256 * 1024
    assert settings.allow_private_webhook_targets is False
    assert settings.extra == {}


def test_variables_are_parsed_into_typed_fields() -> None:
    settings = Settings.from_env(
        {
            "JOBDESK_DATABASE_URL": "postgresql+psycopg://u@h/db",
            "JOBDESK_JOB_MODULES": "myapp.jobs, other.jobs ,",
            "JOBDESK_LEASE_SECONDS": "0.2",
            "JOBDESK_ALLOW_PRIVATE_WEBHOOK_TARGETS": "yes",
            "JOBDESK_MAX_PAYLOAD_BYTES": "4096",
            "JOBDESK_LOG_FORMAT": "JSON",
            "JOBDESK_SOMETHING_NEW": "kept",
        }
    )
    assert settings.database_url == "postgresql+psycopg://u@h/db"
    assert settings.job_modules == ("myapp.jobs", "other.jobs")
    assert settings.lease_seconds == 0.2
    assert settings.allow_private_webhook_targets is True
    assert settings.max_payload_bytes == 4096
    assert settings.log_format == "json"
    assert settings.extra == {"something_new": "kept"}


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
