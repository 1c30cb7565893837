"""The time zones people read the dashboard's times in, and an instant written in one.

A zone is an IANA name (`Europe/Berlin`, `America/New_York`) that this machine's time
zone database knows; anything else — a typo, a path, a name the browser knows but the
database does not — is refused by `check_timezone` and ignored by `known_zone`. Times
are stored and compared in UTC everywhere; a zone only changes how one is written:
`local_text` gives the wall-clock time with the zone's abbreviation, so "02:30 CEST"
and "02:30 CET" on the last Sunday of October stay two different instants.

Pure functions; no SQL here (the operator's own setting is `accounts.set_timezone`).
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo, available_timezones

from jobdesk.shared.core.errors import ValidationError

#: The longest IANA name is 32 characters (`America/Argentina/ComodRivadavia`).
ZONE_MAX_CHARS = 64
DEFAULT_ZONE = "UTC"


@functools.cache
def zone_names() -> frozenset[str]:
    """Every zone name the time zone database offers (read once; it does not change
    while the process runs), always with UTC."""
    return frozenset(available_timezones()) | {DEFAULT_ZONE}


def known_zone(name: object) -> tzinfo | None:
    """The zone called `name`, or None when it is not a zone this machine knows."""
    if not isinstance(name, str) or name not in zone_names():
        return None
    if name == DEFAULT_ZONE:
        return UTC
    return ZoneInfo(name)


def check_timezone(name: object) -> str:
    """`name` when it is a known IANA zone, else a ValidationError saying what is."""
    if not isinstance(name, str) or not name.strip():
        raise ValidationError("timezone", "must be an IANA zone name such as Europe/Berlin")
    name = name.strip()
    if len(name) > ZONE_MAX_CHARS or known_zone(name) is None:
        shown = name if len(name) <= ZONE_MAX_CHARS else name[: ZONE_MAX_CHARS - 1] + "…"
        raise ValidationError(
            "timezone",
            f"{shown!r} is not a time zone this server knows; use an IANA name such as "
            "Europe/Berlin, America/New_York or UTC",
        )
    return name


def as_utc(moment: datetime) -> datetime:
    """`moment` in UTC; a naive one is taken as UTC already (what is stored), never as
    the server's local time."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def abbreviation(moment: datetime) -> str:
    """The zone's short name at that instant ("CET", "EDT", "JST"); zones without one
    (the database writes "-03") as "UTC-03:00"."""
    name = moment.strftime("%Z")
    if name and name[0] not in "+-":
        return name
    offset = moment.strftime("%z")
    return f"UTC{offset[:3]}:{offset[3:5]}" if offset else DEFAULT_ZONE


def local_text(
    moment: datetime, zone: tzinfo, *, now: datetime | None = None, seconds: bool = True
) -> str:
    """`moment` on the wall clock of `zone` with its abbreviation: "2026-10-25 02:30:00
    CET", or "02:30:00 CET" when it falls on the same local day as `now`."""
    moment = as_utc(moment)
    try:
        local = moment.astimezone(zone)
    except (OverflowError, ValueError):  # the first or last day of the calendar
        local = moment
    clock = local.strftime("%H:%M:%S" if seconds else "%H:%M")
    if now is None or as_utc(now).astimezone(local.tzinfo).date() != local.date():
        clock = f"{local:%Y-%m-%d} {clock}"
    return f"{clock} {abbreviation(local)}"
