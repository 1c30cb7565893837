"""Settings read from `JOBDESK_*` environment variables into one frozen dataclass.

Every process (CLI, worker, dashboard) builds a `Settings` once at start-up with
`Settings.from_env()`; CLI options override fields with `dataclasses.replace`.
Parsing is strict: a malformed value stops start-up with a message naming the variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

PREFIX = "JOBDESK_"
DEFAULT_DATABASE_URL = "sqlite:///jobdesk.db"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class SettingsError(ValueError):
    """A `JOBDESK_*` variable holds a value that cannot be used."""


def parse_bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SettingsError(f"{name}: expected one of 1/true/yes/on or 0/false/no/off, got {raw!r}")


def parse_seconds(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}: expected a number of seconds, got {raw!r}") from None
    if not value >= 0 or value == float("inf"):
        raise SettingsError(f"{name}: expected a finite number of seconds >= 0, got {raw!r}")
    return value


def parse_int(name: str, raw: str, minimum: int = 0) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name}: expected a whole number, got {raw!r}") from None
    if value < minimum:
        raise SettingsError(f"{name}: must be >= {minimum}, got {value}")
    return value


def parse_list(raw: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.split(",") if part.strip())


@dataclass(frozen=True)
class Settings:
    """Everything configurable, with production-safe defaults."""

    database_url: str = DEFAULT_DATABASE_URL
    job_modules: tuple[str, ...] = ()
    secret_key: str = ""
    lease_seconds: float = 30.0
    heartbeat_seconds: float = 10.0
    reaper_interval_seconds: float = 10.0
    poll_interval_seconds: float = 1.0
    shutdown_timeout_seconds: float = 30.0
    smtp_url: str = "smtp://127.0.0.1:25"
    mail_from: str = "jobdesk@localhost"
    allow_private_webhook_targets: bool = False
    max_payload_bytes: int = 256 * 1024
    db_pool_size: int = 10
    db_connect_timeout_seconds: float = 5.0
    db_statement_timeout_seconds: float = 30.0
    log_format: str = "text"
    trusted_proxy_header: str = ""
    trusted_proxies: tuple[str, ...] = ()
    extra: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Build settings from `environ` (default `os.environ`); unknown JOBDESK_* keys go
        to `extra` so later features can read their own variables."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        known = {f.name for f in fields(cls)} - {"extra"}
        extra: dict[str, str] = {}
        for key, raw in env.items():
            if not key.startswith(PREFIX):
                continue
            name = key[len(PREFIX) :].lower()
            if name not in known:
                extra[name] = raw
                continue
            values[name] = _parse_field(key, name, raw)
        values["extra"] = extra
        return cls(**values)


_BOOL_FIELDS = {"allow_private_webhook_targets"}
_INT_FIELDS = {"max_payload_bytes": 1024, "db_pool_size": 1}
_LIST_FIELDS = {"job_modules", "trusted_proxies"}
_CHOICES = {"log_format": ("text", "json")}


def _parse_field(key: str, name: str, raw: str) -> Any:
    if name in _BOOL_FIELDS:
        return parse_bool(key, raw)
    if name in _INT_FIELDS:
        return parse_int(key, raw, _INT_FIELDS[name])
    if name in _LIST_FIELDS:
        return parse_list(raw)
    if name.endswith("_seconds"):
        return parse_seconds(key, raw)
    if name in _CHOICES:
        value = raw.strip().lower()
        if value not in _CHOICES[name]:
            raise SettingsError(f"{key}: expected one of {', '.join(_CHOICES[name])}, got {raw!r}")
        return value
    return raw
