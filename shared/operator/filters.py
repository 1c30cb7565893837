"""`JobFilters`: the one validated description of "which jobs", shared by the dashboard,
the CLI and the read/triage queries.

Filters are parsed from query-string-like mappings (`from_args`) and written back
(`to_args`) so every URL that shows a list carries its filters — bookmarkable, and
kept across the redirect that follows an action. Everything that ends up in SQL is
either bound as a parameter or chosen from an allow-list (statuses, sort orders, page
sizes, time ranges); a bad value raises `ValidationError` naming the parameter.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.core.models import KEY_LENGTH
from jobdesk.shared.core.states import JobStatus, Resolution
from jobdesk.shared.core.validation import NAME_PATTERN
from jobdesk.shared.operator.queries.payload_search import (
    Term,
    format_terms,
    parse_terms,
    refuse_hidden,
)
from jobdesk.shared.operator.queries.visible_text import refuse_masked_value

PAGE_SIZES: tuple[int, ...] = (25, 50, 100)
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100
#: Sort orders a list can use; each maps to (column, direction) in `operator.queries`.
SORTS: tuple[str, ...] = ("newest", "oldest", "next_run", "updated")
DEFAULT_SORT = "newest"
#: Relative time windows for the `range` parameter.
RANGES: dict[str, timedelta] = {
    "1h": timedelta(hours=1),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
}
#: Which timestamp a time range applies to.
TIME_FIELDS: tuple[str, ...] = ("created", "finished", "updated")
SEARCH_MIN = 3
SEARCH_MAX = 200
UNRESOLVED = "unresolved"
#: The `held` filter's values (the holds module owns what each means).
HOLD_FILTERS: tuple[str, ...] = ("any", "queue", "endpoint", "breaker")
_FINGERPRINT = re.compile(r"[0-9a-f]{16}")


def _single(args: Mapping[str, Any], name: str) -> str | None:
    """The value of a parameter, None when absent or blank (empty form fields)."""
    value = args.get(name)
    if isinstance(value, list | tuple):
        value = value[0] if value else None
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(name, f"must be text, got {type(value).__name__}")
    value = value.strip()
    return value or None


def _name(args: Mapping[str, Any], name: str) -> str | None:
    value = _single(args, name)
    if value is None:
        return None
    if not NAME_PATTERN.fullmatch(value):
        raise ValidationError(name, "use 1-100 characters from a-z 0-9 . _ -")
    return value


def _key(args: Mapping[str, Any], name: str) -> str | None:
    value = _single(args, name)
    if value is None:
        return None
    if len(value) > KEY_LENGTH:
        raise ValidationError(name, f"is {len(value)} characters long; the limit is {KEY_LENGTH}")
    if any(ord(char) < 32 or ord(char) == 127 for char in value):
        raise ValidationError(name, "must not contain control characters")
    return value


def _choice(args: Mapping[str, Any], name: str, allowed: tuple[str, ...]) -> str | None:
    value = _single(args, name)
    if value is None:
        return None
    if value not in allowed:
        raise ValidationError(name, f"{value[:40]!r} is not one of: {', '.join(allowed)}")
    return value


def name_param(args: Mapping[str, Any], name: str) -> str | None:
    """A queue or job type parameter, checked like `JobFilters`' (None when blank)."""
    return _name(args, name)


def choice_param(args: Mapping[str, Any], name: str, allowed: tuple[str, ...]) -> str | None:
    """A parameter from an allow-list, checked like `JobFilters`' (None when blank)."""
    return _choice(args, name, allowed)


#: The largest id (and any other integer) a query may bind: PostgreSQL's BIGINT.
MAX_ID = 2**63 - 1


def check_time_range(name: str, value: datetime) -> datetime:
    """`value` in UTC, or a ValidationError when it has no UTC form (year 1 with a
    positive offset, year 9999 with a negative one) — never an OverflowError."""
    try:
        return value.astimezone(UTC)
    except (OverflowError, ValueError):
        raise ValidationError(
            name, f"{value.isoformat()[:40]!r} is out of range (years 1 to 9999 in UTC)"
        ) from None


def parse_time(name: str, raw: str | None) -> datetime | None:
    """An ISO 8601 time; a time without a zone is taken as UTC (form inputs have none)."""
    if raw is None:
        return None
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        raise ValidationError(
            name, f"{raw[:40]!r} is not a date-time like 2026-01-31T09:00"
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return check_time_range(name, value)


def format_time(value: datetime) -> str:
    """The inverse of `parse_time` for URLs: `0001-01-01T00:00:00` (zero-padded, unlike
    `strftime("%Y")` for years before 1000)."""
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="seconds")


def check_id(name: str, value: int) -> int:
    """An id bound into SQL: 1 to 2^63-1 (a larger one would overflow BIGINT)."""
    if isinstance(value, bool) or not 1 <= value <= MAX_ID:
        raise ValidationError(name, f"must be a whole number from 1 to {MAX_ID}")
    return value


def parse_positive_int(name: str, raw: str | None, maximum: int = 2**62) -> int | None:
    if raw is None:
        return None
    # ASCII only: str.isdigit() also says yes to "²", which int() then refuses.
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 19:
        raise ValidationError(name, f"{raw[:40]!r} is not a positive whole number")
    value = int(raw)
    if not 1 <= value <= maximum:
        raise ValidationError(name, f"must be between 1 and {maximum}")
    return value


@dataclass(frozen=True, slots=True)
class JobFilters:
    """Which jobs to show or act on. Empty fields do not filter."""

    status: str | None = None
    queue: str | None = None
    job_type: str | None = None
    group_key: str | None = None
    idempotency_key: str | None = None
    fingerprint: str | None = None
    #: `unresolved`, or one of the `Resolution` values (dead jobs only).
    resolution: str | None = None
    error: str | None = None
    range: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    time_field: str = "created"
    retried_from: int | None = None
    #: Jobs sharing job #N's group / idempotency key: how a page links to "the same key"
    #: without putting the key (possibly an email or a secret) into the URL.
    group_of: int | None = None
    key_of: int | None = None
    #: The jobs made by the action that wrote audit entry #N (e.g. every retry of one
    #: bulk "Retry all"), so the flash after an action can link to exactly those.
    from_audit: int | None = None
    #: The children of batch #N (`jobdesk_batches`): how a batch's page hands "retry
    #: all dead children" to the bulk preview, and links its children to the list.
    batch: int | None = None
    #: Webhook deliveries to this endpoint (query argument `webhook`: Flask's `url_for`
    #: takes `endpoint` for itself).
    endpoint: str | None = None
    #: Waiting jobs a paused queue, paused endpoint or open breaker holds (`any`) or one
    #: of those (`operator.holds.HOLD_FILTERS`).
    held: str | None = None
    #: Jobs quarantine hold #N holds now (`jobdesk_holds`, `operator.holds.quarantined_by`).
    held_by: int | None = None
    #: The new jobs redrive #N requeued so far (`jobdesk_redrive_items.new_job_id`).
    redrive: int | None = None
    #: Payload terms (`payload=user_id=42 endpoint=crm`, see `operator.payload_search`).
    payload: tuple[Term, ...] = ()
    sort: str = DEFAULT_SORT
    page_size: int = DEFAULT_PAGE_SIZE
    #: Who searches sees emails masked (a viewer): the error search then matches only
    #: what they see (`operator.visible_text`). Not a URL parameter: the role decides.
    mask_emails: bool = False

    @classmethod
    def from_args(cls, args: Mapping[str, Any], *, mask_emails: bool = False) -> JobFilters:
        """Parse query arguments (a Flask `request.args`, a dict); raises ValidationError.

        `mask_emails`: the searcher sees emails masked (a viewer), so a payload search or
        an exact key filter for one is refused like one for a secret, and the error
        search looks only at what a viewer sees of an error."""
        payload = parse_terms(_single(args, "payload"))
        refuse_hidden(payload, mask_emails=mask_emails)
        status = _choice(args, "status", tuple(str(s) for s in JobStatus))
        resolution = _choice(args, "resolution", (UNRESOLVED, *(str(r) for r in Resolution)))
        fingerprint = _single(args, "fingerprint")
        if fingerprint is not None and not _FINGERPRINT.fullmatch(fingerprint):
            raise ValidationError("fingerprint", "must be 16 hexadecimal digits")
        error = _single(args, "error")
        if error is not None:
            if len(error) < SEARCH_MIN:
                raise ValidationError("error", f"search for at least {SEARCH_MIN} characters")
            if len(error) > SEARCH_MAX:
                raise ValidationError("error", f"search text is limited to {SEARCH_MAX} characters")
            if "\x00" in error:
                raise ValidationError("error", "must not contain NUL")
        page_size_raw = _single(args, "page_size")
        page_size = DEFAULT_PAGE_SIZE
        if page_size_raw is not None:
            if page_size_raw not in {str(size) for size in PAGE_SIZES}:
                raise ValidationError(
                    "page_size", f"must be one of {', '.join(str(s) for s in PAGE_SIZES)}"
                )
            page_size = int(page_size_raw)
        since = parse_time("since", _single(args, "since"))
        until = parse_time("until", _single(args, "until"))
        if since is not None and until is not None and since > until:
            raise ValidationError("until", "must be after `since`")
        return cls(
            status=status,
            queue=_name(args, "queue"),
            job_type=_name(args, "type"),
            group_key=refuse_masked_value("group", _key(args, "group"), mask_emails=mask_emails),
            idempotency_key=refuse_masked_value("key", _key(args, "key"), mask_emails=mask_emails),
            fingerprint=fingerprint,
            resolution=resolution,
            error=error,
            range=_choice(args, "range", tuple(RANGES)),
            since=since,
            until=until,
            time_field=_choice(args, "time", TIME_FIELDS) or "created",
            retried_from=parse_positive_int("retried_from", _single(args, "retried_from")),
            group_of=parse_positive_int("group_of", _single(args, "group_of")),
            key_of=parse_positive_int("key_of", _single(args, "key_of")),
            from_audit=parse_positive_int("from_audit", _single(args, "from_audit")),
            batch=parse_positive_int("batch", _single(args, "batch")),
            endpoint=_name(args, "webhook"),
            held=_choice(args, "held", HOLD_FILTERS),
            held_by=parse_positive_int("held_by", _single(args, "held_by")),
            redrive=parse_positive_int("redrive", _single(args, "redrive")),
            payload=payload,
            sort=_choice(args, "sort", SORTS) or DEFAULT_SORT,
            page_size=page_size,
            mask_emails=mask_emails,
        )

    def to_args(self) -> dict[str, str]:
        """The non-default filters as query arguments (the inverse of `from_args`)."""
        out: dict[str, str] = {}
        names = {"job_type": "type", "group_key": "group", "idempotency_key": "key",
                 "time_field": "time", "endpoint": "webhook"}  # fmt: skip
        defaults = {"time_field": "created", "sort": DEFAULT_SORT, "page_size": DEFAULT_PAGE_SIZE}
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name == "mask_emails":
                continue
            if value is None or value == () or defaults.get(item.name) == value:
                continue
            if item.name == "payload":
                value = format_terms(value)
            elif isinstance(value, datetime):
                value = format_time(value)
            out[names.get(item.name, item.name)] = str(value)
        return out

    def window(self, now: datetime) -> tuple[datetime | None, datetime | None]:
        """The effective [since, until] bounds; a relative `range` ends at `now`."""
        since, until = self.since, self.until
        if self.range is not None:
            since = now - RANGES[self.range]
        return since, until

    def dead_unresolved(self) -> JobFilters:
        """The same filters narrowed to dead jobs that still need a decision."""
        return replace(self, status=str(JobStatus.DEAD), resolution=UNRESOLVED)

    @property
    def is_empty(self) -> bool:
        return not self.to_args()


@dataclass(frozen=True, slots=True)
class AuditFilters:
    """Which audit entries to show."""

    actor: str | None = None
    action: str | None = None
    job_id: int | None = None
    since: datetime | None = None
    until: datetime | None = None
    page_size: int = DEFAULT_PAGE_SIZE

    @classmethod
    def from_args(
        cls, args: Mapping[str, Any], actions: tuple[str, ...], *, mask_emails: bool = False
    ) -> AuditFilters:
        """Parse query arguments; `mask_emails` (a viewer): an actor that is an email
        address is shown masked, so it cannot be filtered by either."""
        page_size_raw = _single(args, "page_size")
        if page_size_raw is not None and page_size_raw not in {str(s) for s in PAGE_SIZES}:
            raise ValidationError(
                "page_size", f"must be one of {', '.join(str(s) for s in PAGE_SIZES)}"
            )
        since = parse_time("since", _single(args, "since"))
        until = parse_time("until", _single(args, "until"))
        if since is not None and until is not None and since > until:
            raise ValidationError("until", "must be after `since`")
        return cls(
            actor=refuse_masked_value("actor", _key(args, "actor"), mask_emails=mask_emails),
            action=_choice(args, "action", actions),
            job_id=parse_positive_int("job", _single(args, "job")),
            since=since,
            until=until,
            page_size=int(page_size_raw) if page_size_raw else DEFAULT_PAGE_SIZE,
        )

    def to_args(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if self.actor:
            out["actor"] = self.actor
        if self.action:
            out["action"] = self.action
        if self.job_id:
            out["job"] = str(self.job_id)
        if self.since:
            out["since"] = format_time(self.since)
        if self.until:
            out["until"] = format_time(self.until)
        if self.page_size != DEFAULT_PAGE_SIZE:
            out["page_size"] = str(self.page_size)
        return out
