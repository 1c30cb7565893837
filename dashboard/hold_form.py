"""The quarantine form of the holds page: what to hold, why and until when.

`HoldForm` is what the operator typed, kept as text so the form can show it again;
`read_hold` turns it into a `HoldRequest` or raises `HoldFormError` with every problem
named by its field, so the page shows each one next to its field and writes nothing.

The end is either "for N hours" or an `until` wall-clock time from a `datetime-local`
input, read on the viewer's clock (`viewer_zone`, the zone every page shows times in and
the form names), never the server's. The limits are the ones the command line applies
(`shared.flow.holds.parse_hold_end`): in the future, at most 90 days away.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, tzinfo

from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.core.validation import check_reason
from jobdesk.shared.flow.holds import (
    HOLD_MATCHES,
    LONGEST_HOLD,
    REASON_LENGTH,
    HoldTarget,
    parse_hold_end,
)
from jobdesk.shared.operator.filters import parse_positive_int

#: What each kind of match is called on the page, in the order the form offers them.
_LABELS = {
    "concurrency_key": "Concurrency key",
    "group_key": "Group key",
    "payload": "Payload term",
}
MATCH_LABELS = {match: _LABELS[match] for match in HOLD_MATCHES}
#: The longest "for N hours" the form accepts (the same 90 days as an end time).
MAX_HOURS = int(LONGEST_HOLD.total_seconds() // 3600)
#: A field's text is kept up to this long (longer input is refused by its check anyway).
_KEPT_CHARS = 2000


@dataclass(frozen=True, slots=True)
class HoldForm:
    """The form's fields as typed (empty: not given)."""

    match: str = HOLD_MATCHES[0]
    value: str = ""
    reason: str = ""
    until: str = ""
    hours: str = ""

    @classmethod
    def from_values(cls, values: Mapping[str, str]) -> HoldForm:
        """From a submitted form or a query string (the preview's, the job page's
        "Quarantine…" link)."""

        def text(name: str) -> str:
            raw = values.get(name)
            return raw[:_KEPT_CHARS] if isinstance(raw, str) else ""

        return cls(
            match=text("match") or HOLD_MATCHES[0],
            value=text("value"),
            reason=text("reason"),
            until=text("until").strip(),
            hours=text("hours").strip(),
        )

    def args(self) -> dict[str, str]:
        """The fields given, as query arguments or hidden inputs (the preview carries
        them to the confirmation and back to the form)."""
        return {name: value for name, value in asdict(self).items() if value}


@dataclass(frozen=True, slots=True)
class HoldRequest:
    """A checked form: the target, the reason as stored, and the end (None: open)."""

    target: HoldTarget
    reason: str
    until: datetime | None


class HoldFormError(Exception):
    """The form as typed cannot be placed: `problems` maps each field to what is wrong
    with it, worded to follow the field's label ("Reason: is required …")."""

    def __init__(self, problems: dict[str, str]) -> None:
        super().__init__("; ".join(f"{field} {message}" for field, message in problems.items()))
        self.problems = problems


#: Where a problem is shown when the check names another field: `HoldTarget.parse`
#: calls a malformed payload term "payload", the form calls that field "value".
_FIELD_OF = {"payload": "value", "for": "hours"}


def read_hold(form: HoldForm, *, now: datetime, zone: tzinfo, zone_name: str) -> HoldRequest:
    """Check every field; raises HoldFormError naming each field that is wrong."""
    problems: dict[str, str] = {}
    target = reason = None
    until: datetime | None = None
    try:
        target = HoldTarget.parse(form.match, form.value)
    except ValidationError as exc:
        problems[_FIELD_OF.get(exc.field, exc.field)] = exc.message
    try:
        reason = _reason(form.reason)
    except ValidationError as exc:
        problems["reason"] = exc.message
    try:
        until = _end(form, now=now, zone=zone, zone_name=zone_name)
    except ValidationError as exc:
        problems[_FIELD_OF.get(exc.field, exc.field)] = exc.message
    if problems or target is None or reason is None:
        raise HoldFormError(problems)
    return HoldRequest(target, reason, until)


def _reason(text: str) -> str:
    """Required, without NUL (PostgreSQL refuses it), credentials masked, and no longer
    than a hold keeps."""
    checked = check_reason(text, required=True)
    assert checked is not None
    if len(checked) > REASON_LENGTH:
        raise ValidationError(
            "reason", f"is {len(checked):,} characters long; a hold keeps {REASON_LENGTH}"
        )
    return checked


def _end(form: HoldForm, *, now: datetime, zone: tzinfo, zone_name: str) -> datetime | None:
    if form.hours and form.until:
        raise ValidationError("until", "give an end time or a number of hours, not both")
    if form.hours:
        hours = parse_positive_int("hours", form.hours, maximum=MAX_HOURS)
        try:
            return parse_hold_end(for_text=f"{hours}h", now=now)
        except ValidationError as exc:
            raise ValidationError("hours", exc.message) from None
    if form.until:
        local = wall_clock_time(form.until, zone=zone, zone_name=zone_name)
        return parse_hold_end(until_text=local.isoformat(), now=now)
    return None


def wall_clock_time(text: str, *, zone: tzinfo, zone_name: str) -> datetime:
    """`2026-12-05T09:00` (a `datetime-local` value) on the clock of `zone`, as an
    instant. A time the clocks skip there (the hour lost in spring) is refused; in the
    hour repeated in autumn the first one is meant — the preview shows which, with the
    zone's abbreviation."""
    try:
        naive = datetime.fromisoformat(text)
    except ValueError:
        raise ValidationError(
            "until", f"{text[:40]!r} is not a date and time like 2026-12-05T09:00"
        ) from None
    if naive.tzinfo is not None:
        return naive
    try:
        moment = naive.replace(tzinfo=zone)
        round_trip = moment.astimezone(UTC).astimezone(zone).replace(tzinfo=None)
    except (OverflowError, ValueError):
        raise ValidationError("until", f"{text[:40]!r} is out of range (years 1 to 9999)") from None
    if round_trip != naive:
        raise ValidationError(
            "until", f"{naive:%Y-%m-%d %H:%M} does not exist in {zone_name}: the clocks skip it"
        )
    return moment
