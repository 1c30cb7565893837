"""How one `JOBDESK_*` value is read: booleans, numbers, seconds, lists, rates, days.

Every parser takes the variable's name so its error says which variable is wrong and
what it expected; none of them accepts NaN or infinity.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "NEVER",
    "Rate",
    "SettingsError",
    "check_host_names",
    "check_listen_url",
    "check_networks",
    "networks",
    "parse_bool",
    "parse_int",
    "parse_list",
    "parse_number",
    "parse_seconds",
]

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
#: Words that switch a "days" setting off (keep forever).
NEVER = frozenset({"never", "off", "none", "disabled"})
_RATE_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


class SettingsError(ValueError):
    """A `JOBDESK_*` variable is unknown or holds a value that cannot be used."""


def parse_bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SettingsError(f"{name}: expected one of 1/true/yes/on or 0/false/no/off, got {raw!r}")


def parse_number(name: str, raw: str, *, what: str = "a number") -> float:
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}: expected {what}, got {raw!r}") from None
    if not value >= 0 or math.isinf(value):
        raise SettingsError(f"{name}: expected a finite number >= 0, got {raw!r}")
    return value


def parse_seconds(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}: expected a number of seconds, got {raw!r}") from None
    if not value >= 0 or math.isinf(value):
        raise SettingsError(f"{name}: expected a finite number of seconds >= 0, got {raw!r}")
    return value


def parse_int(name: str, raw: str, minimum: int = 0) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise SettingsError(f"{name}: expected a whole number, got {raw!r}") from None
    if value < minimum:
        raise SettingsError(f"{name}: must be >= {minimum}, got {value}")
    return value


def parse_list(raw: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.split(",") if part.strip())


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def networks(entries: Iterable[str]) -> tuple[Network, ...]:
    """Addresses (`10.0.0.5`, `::1`) and CIDR networks (`10.0.0.0/8`) as networks; host
    bits are allowed (`10.1.2.3/8` is `10.0.0.0/8`). Raises ValueError for anything else."""
    return tuple(ipaddress.ip_network(entry.strip(), strict=False) for entry in entries)


def check_networks(name: str, value: object) -> None:
    """A list of addresses or CIDR networks; `*` and host names are refused."""
    assert isinstance(value, tuple)
    for entry in value:
        try:
            networks([entry])
        except ValueError:
            raise SettingsError(
                f"{name}: {entry!r} is not an IP address or CIDR network (like 10.0.0.0/8); "
                "list your proxies' addresses — `*` and host names are not accepted"
            ) from None


@dataclass(frozen=True, slots=True)
class Rate:
    """`count` events per `per_seconds`: written `10/s`, `600/m`, `5/1.5s`, `100/h`."""

    count: float
    per_seconds: float = 1.0

    @classmethod
    def parse(cls, spec: str, name: str = "rate") -> Rate:
        count_text, _, period = spec.strip().partition("/")
        try:
            unit = period[-1]
            amount = float(period[:-1] or 1)
            count = float(count_text)
            seconds = amount * _RATE_UNITS[unit]
        except (ValueError, KeyError, IndexError):
            raise SettingsError(
                f"{name}: expected N/s, N/m or N/h (e.g. 10/s), got {spec!r}"
            ) from None
        if not (count > 0 and seconds > 0) or math.isinf(count) or math.isinf(seconds):
            raise SettingsError(f"{name}: the rate must be a finite number > 0, got {spec!r}")
        return cls(count, seconds)

    def __str__(self) -> str:
        for unit, seconds in _RATE_UNITS.items():
            if self.per_seconds == seconds:
                return f"{self.count:g}/{unit}"
        return f"{self.count:g}/{self.per_seconds:g}s"


_HOST_NAME = re.compile(r"\.?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")


def check_host_names(name: str, value: object) -> None:
    """Host names (`jobs.example.com`, `.example.com` for subdomains) or IP addresses,
    without scheme, port or wildcard."""
    assert isinstance(value, tuple)
    for entry in value:
        text = entry.strip().lower()
        try:
            ipaddress.ip_address(text.strip("[]"))
        except ValueError:
            if not _HOST_NAME.fullmatch(text):
                raise SettingsError(
                    f"{name}: {entry!r} is not a host name like jobs.example.com or "
                    ".example.com (no scheme, port or *)"
                ) from None


_LISTEN_SCHEMES = ("postgresql://", "postgresql+psycopg://", "postgres://")


def check_trace_url_template(name: str, value: object) -> None:
    """An http(s) URL with the `{trace_id}` placeholder (pages link it)."""
    if value is None:
        return
    assert isinstance(value, str)
    if not value.startswith(("https://", "http://")) or "{trace_id}" not in value:
        raise SettingsError(
            f"{name}: an http(s) URL with {{trace_id}} where the trace id goes, e.g. "
            "https://tempo.example/trace/{trace_id}"
        )


def check_encryption_keys(name: str, value: object) -> None:
    """Every comma-separated key is a Fernet key (unset is allowed: then enqueues with
    secrets are refused, naming the variable)."""
    if value is None:
        return
    from jobdesk.shared.secrets.keys import KeysError, parse_keys

    assert isinstance(value, str)
    try:
        parse_keys(value, name)
    except KeysError as exc:
        raise SettingsError(str(exc)) from None


def check_listen_url(name: str, value: object) -> None:
    """A PostgreSQL URL: LISTEN exists only there (SQLite workers always poll)."""
    if value is None:
        return
    assert isinstance(value, str)
    if not value.startswith(_LISTEN_SCHEMES):
        # Only the scheme is echoed: the rest of a URL may carry a password.
        scheme = value.split("://")[0] + "://" if "://" in value else "no scheme"
        raise SettingsError(
            f"{name}: not a PostgreSQL URL ({scheme}); use postgresql+psycopg://user@host:5432/db "
            "(a direct connection to the server, not through PgBouncer)"
        )
