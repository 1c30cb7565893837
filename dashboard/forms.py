"""Parsing form and query input: the request's job filters for the current role, job id
lists, bulk selections and JSON payload text — each refusing bad input with a
`ValidationError` naming the field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from werkzeug.datastructures import MultiDict

from jobdesk.dashboard import auth
from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.core.json_text import loads_json_text
from jobdesk.shared.operator.commands.triage import BULK_CAP, Selection
from jobdesk.shared.operator.filters import JobFilters, parse_positive_int


def request_filters(args: Mapping[str, Any]) -> JobFilters:
    """Job filters as the current role may use them: a viewer may not search payloads
    for an email address (viewers see emails masked, `operator.payload_search`)."""
    return JobFilters.from_args(args, mask_emails=auth.is_viewer_only())


def parse_ids(values: list[str]) -> tuple[int, ...]:
    if len(values) > BULK_CAP:
        raise ValidationError(
            "ids", f"{len(values):,} jobs selected; one action handles at most {BULK_CAP:,}"
        )
    ids = []
    for raw in values:
        value = parse_positive_int("ids", raw.strip())
        if value is not None:
            ids.append(value)
    return tuple(dict.fromkeys(ids))


def parse_bulk_selection(args: MultiDict[str, str], *, with_range: bool) -> Selection:
    """Either `ids=1&ids=2…` or `scope=all` plus filter arguments (and, when confirming,
    the `low`/`high` id range the preview showed)."""
    if args.get("scope") == "all":
        filters = JobFilters.from_args(args)
        id_range = None
        if with_range:
            low = parse_positive_int("low", args.get("low"))
            high = parse_positive_int("high", args.get("high"))
            if low is None or high is None or low > high:
                raise ValidationError(
                    "range", "the confirmation is missing its id range; open the preview again"
                )
            id_range = (low, high)
        return Selection(filters=filters, id_range=id_range)
    ids = parse_ids(args.getlist("ids"))
    if not ids:
        raise ValidationError("ids", "select at least one job (tick its checkbox)")
    return Selection(ids=ids)


def parse_payload_text(text: str | None) -> Mapping[str, Any]:
    """The edited payload: JSON text that must parse to an object (NaN/Infinity, numbers
    that do not fit in 64 bits or a double refused — `core.json_text`)."""
    if text is None or not text.strip():
        raise ValidationError("payload", "is empty; a payload is a JSON object like {}")
    value = loads_json_text("payload", text)
    if not isinstance(value, dict):
        raise ValidationError("payload", f"must be a JSON object, got {type(value).__name__}")
    return value
