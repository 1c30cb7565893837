"""Validation of everything an enqueue carries, identical on SQLite and PostgreSQL.

The payload is serialised once here (strict JSON: no NaN/Infinity, no datetimes,
Decimals, bytes or sets, no NUL, no lone surrogates) and the result is what gets stored,
so both databases see the same bytes and refuse the same inputs. Failures name the
field, down to the path inside the payload (`payload.items[2].price`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from jobdesk.shared.core.db import SerializedJSON
from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.core.masking import mask_text
from jobdesk.shared.core.models import (
    KEY_LENGTH,
    MAX_ATTEMPTS_MAX,
    MAX_ATTEMPTS_MIN,
    NAME_LENGTH,
    PRIORITY_MAX,
    PRIORITY_MIN,
)

NAME_PATTERN = re.compile(rf"[a-z0-9._-]{{1,{NAME_LENGTH}}}")
#: Jobs scheduled further ahead than this are almost always a unit bug (ms vs s).
SCHEDULE_HORIZON = timedelta(days=366)
DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024
#: Deepest nesting of objects and arrays a payload (or a result) may have. Payloads are
#: small inputs — ids and options — and a deeply nested document is a bug or an attack:
#: decoding one costs every reader a deep recursion (claim, dashboard, reports).
MAX_DEPTH = 100
#: JSON integers must fit in 64 bits: beyond that they lose precision in most JSON
#: readers and a 5,000-digit number costs quadratic time to convert.
INT_RANGE = (-(2**63), 2**63 - 1)
#: Nineteen digits in a row in the encoded text: possibly an integer beyond 64 bits (or
#: just digits inside a string), which the slow walk then tells apart.
_LONG_NUMBER = re.compile(r"\d{19}")
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")


def check_name(field: str, value: object) -> str:
    """Job types and queue names: `[a-z0-9._-]{1,100}`."""
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, got {type(value).__name__}")
    if not NAME_PATTERN.fullmatch(value):
        shown = value if len(value) <= 40 else value[:40] + "…"
        raise ValidationError(
            field,
            f"{shown!r} is not a valid name: use 1-{NAME_LENGTH} characters from a-z 0-9 . _ -",
        )
    return value


def check_key(field: str, value: object) -> str | None:
    """Idempotency and group keys: free text, bounded, no control characters."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(field, f"must be a string, got {type(value).__name__}")
    if not value:
        raise ValidationError(field, "must not be empty (omit it instead)")
    if len(value) > KEY_LENGTH:
        raise ValidationError(field, f"is {len(value)} characters long; the limit is {KEY_LENGTH}")
    if _CONTROL_CHARS.search(value):
        raise ValidationError(field, "must not contain control characters (newline, NUL, …)")
    _check_encodable(field, value)
    return value


def check_int_range(field: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(field, f"must be an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValidationError(field, f"must be between {low} and {high}, got {value}")
    return value


def check_priority(value: object) -> int:
    return check_int_range("priority", value, PRIORITY_MIN, PRIORITY_MAX)


def check_max_attempts(value: object) -> int:
    return check_int_range("max_attempts", value, MAX_ATTEMPTS_MIN, MAX_ATTEMPTS_MAX)


def check_run_at(value: object, now: datetime | None = None) -> datetime:
    """Aware datetimes only, normalised to UTC, no further ahead than the horizon."""
    if not isinstance(value, datetime):
        raise ValidationError("run_at", f"must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValidationError("run_at", "naive datetime; pass a timezone-aware datetime")
    value = value.astimezone(UTC)
    reference = now or datetime.now(UTC)
    if value - reference > SCHEDULE_HORIZON:
        raise ValidationError(
            "run_at", f"{value.isoformat()} is more than {SCHEDULE_HORIZON.days} days ahead"
        )
    return value


def check_timeout(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError("timeout", f"must be a number of seconds, got {type(value).__name__}")
    if not 0 < value <= 86_400 or math.isnan(value):
        raise ValidationError("timeout", f"must be between 0 and 86400 seconds, got {value}")
    return float(value)


#: The most slots one concurrency key may have.
CONCURRENCY_MAX = 10_000


def check_concurrency(value: object) -> int | None:
    """`@job(concurrency=N)`: None or a whole number of slots per key, 1 to 10,000."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(
            "concurrency", f"must be a whole number of slots, got {type(value).__name__}"
        )
    if not 1 <= value <= CONCURRENCY_MAX:
        raise ValidationError(
            "concurrency", f"must be between 1 and {CONCURRENCY_MAX} slots, got {value}"
        )
    return value


#: The longest reason an operator may give (pause, ignore, cancel, disable, …).
REASON_MAX_CHARS = 1000


def check_reason(reason: str | None, *, required: bool) -> str | None:
    """A stripped, bounded reason with credentials masked before it is stored (a 410
    disable's reason names the URL, which may carry `?token=`); None when empty."""
    text = (reason or "").strip()
    if not text:
        if required:
            raise ValidationError("reason", "is required: say why, so others can follow")
        return None
    if len(text) > REASON_MAX_CHARS:
        raise ValidationError(
            "reason", f"is {len(text):,} characters long; the limit is {REASON_MAX_CHARS:,}"
        )
    if "\x00" in text:
        raise ValidationError("reason", "must not contain NUL characters")
    return mask_text(text)


def serialize_payload(
    payload: object, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
) -> SerializedJSON:
    """Serialise a payload to strict JSON, or raise `ValidationError` naming the culprit.

    Fast path (enqueue's hot loop): one C-level `json.dumps`, a walk over the containers
    only to refuse non-string keys (`json` would silently turn `{1: …}` into `{"1": …}`)
    and nesting deeper than `MAX_DEPTH`, and substring tests for NUL and long numbers.
    Only a failure pays for the slow walk that names the exact field.
    """
    if not isinstance(payload, dict):
        if not isinstance(payload, Mapping):
            raise ValidationError(
                "payload", f"must be a JSON object (dict), got {type(payload).__name__}"
            )
        payload = dict(payload)
    return serialize_document("payload", payload, max_bytes)


def serialize_document(field: str, document: object, max_bytes: int) -> SerializedJSON:
    """`serialize_payload` for any JSON value (a handler's result, a progress record)."""
    payload = document
    try:
        nested = isinstance(payload, _CONTAINERS) and not _shape_ok(payload, 1)
        if nested or (type(payload) is int and not INT_RANGE[0] <= payload <= INT_RANGE[1]):
            _locate_problem(payload, field)
        text = _ENCODER.encode(payload)
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
    except (TypeError, ValueError, UnicodeEncodeError, RecursionError):
        _locate_problem(payload, field)
        raise ValidationError(field, "is not valid JSON") from None
    # json escapes NUL as \u0000; the slow walk confirms and names the field.
    if "\\u0000" in text or _LONG_NUMBER.search(text):
        _locate_problem(payload, field)
    if size > max_bytes:
        raise ValidationError(
            field,
            f"is {size:,} bytes; the limit is {max_bytes:,} bytes — store large data elsewhere "
            "and pass a reference (an id)",
        )
    return SerializedJSON(text)


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_CONTAINERS = (dict, list, tuple)
#: Exact types JSON encoded as scalars: one set lookup skips them (most payload values).
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _shape_ok(value: dict[Any, Any] | list[Any] | tuple[Any, ...], depth: int) -> bool:
    """True when every object key at every depth is a `str` and nothing is nested deeper
    than `MAX_DEPTH` (containers only are visited, so this stays cheap)."""
    if depth > MAX_DEPTH:
        return False
    items = value.values() if isinstance(value, dict) else value
    if isinstance(value, dict):
        for key in value:
            if type(key) is not str:
                return False
    for item in items:
        if type(item) in _SCALARS:
            continue
        if isinstance(item, _CONTAINERS) and not _shape_ok(item, depth + 1):
            return False
    return True


def _check_encodable(field: str, text: str) -> None:
    if "\x00" in text:
        raise ValidationError(field, "contains a NUL character (\\u0000)")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(field, "contains a lone surrogate (invalid Unicode)") from None


def _locate_problem(value: Any, path: str, depth: int = 1) -> None:
    """Walk the value and raise a ValidationError for the first thing JSON cannot hold."""
    if depth > MAX_DEPTH and isinstance(value, Mapping | list | tuple):
        raise ValidationError(
            path.split(".", 1)[0], f"is nested more than {MAX_DEPTH} levels deep (at {path[:80]}…)"
        )
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if not INT_RANGE[0] <= value <= INT_RANGE[1]:
            raise ValidationError(path, "is an integer beyond 64 bits; pass it as a string")
        return
    if isinstance(value, str):
        _check_encodable(path, value)
        return
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise ValidationError(path, f"{value} is not allowed in JSON (NaN/Infinity)")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValidationError(
                    f"{path}[{key!r}]", f"object keys must be strings, got {type(key).__name__}"
                )
            _check_encodable(f"{path} key {key!r}", key)
            _locate_problem(item, f"{path}.{key}", depth + 1)
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _locate_problem(item, f"{path}[{index}]", depth + 1)
        return
    raise ValidationError(
        path,
        f"{type(value).__name__} is not JSON; convert it first "
        "(datetime → ISO string, Decimal → string, bytes → base64, set → list)",
    )
