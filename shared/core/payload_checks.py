"""Per-type payload checks: what a job type's payload must contain to be runnable.

`check_payload(job_type, payload)` returns every problem at once as
`ValidationError(field, message)` items (field = `payload.<path>`), so a form can show
each next to its field. The built-in types are declared here; apps declare checks for
their own types with `@job(..., validate=fn)` (or `register_payload_check`). A check
runs at enqueue and when an operator saves a fixed payload, in any process that has
registered it. Types without a check accept
any JSON object (the strict JSON rules of `jobdesk.shared.core.validation` still apply).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.core.validation import NAME_PATTERN

#: A type's check: returns the problems (a list, or None when there are none) or raises
#: ValidationError / PayloadErrors; a plain ValueError counts as a problem of `payload`.
Check = Callable[[Mapping[str, Any]], Iterable[ValidationError] | None]

_checks: dict[str, Check] = {}


class PayloadErrors(ValidationError):
    """Several payload problems found at once; `errors` lists each with its field."""

    def __init__(self, errors: list[ValidationError]) -> None:
        first = errors[0]
        super().__init__(first.field, first.message)
        self.errors = errors

    def __str__(self) -> str:
        return "; ".join(f"{e.field}: {e.message}" for e in self.errors)


def register_payload_check(job_type: str, check: Check) -> None:
    _checks[job_type] = check


def check_payload(job_type: str, payload: Mapping[str, Any]) -> list[ValidationError]:
    """Every problem the type's check finds (empty when runnable or unchecked)."""
    if not isinstance(payload, Mapping):
        return [ValidationError("payload", "must be a JSON object")]
    check = _checks.get(job_type)
    if check is None:
        return []
    try:
        found = check(payload)
    except PayloadErrors as exc:
        return list(exc.errors)
    except ValidationError as exc:
        return [exc]
    except ValueError as exc:
        return [ValidationError("payload", str(exc) or type(exc).__name__)]
    return list(found or [])


def refuse_unrunnable(job_type: str, payload: Mapping[str, Any]) -> None:
    """Raise PayloadErrors when the type's check finds problems (enqueue, fix & retry)."""
    if job_type in _checks:
        errors = check_payload(job_type, payload)
        if errors:
            raise PayloadErrors(errors)


def _text(
    payload: Mapping[str, Any], key: str, *, required: bool, max_len: int = 500
) -> list[ValidationError]:
    field = f"payload.{key}"
    if key not in payload or payload[key] is None:
        return [ValidationError(field, "is required")] if required else []
    value = payload[key]
    if not isinstance(value, str) or not value.strip():
        return [ValidationError(field, "must be a non-empty string")]
    if len(value) > max_len:
        return [ValidationError(field, f"is longer than {max_len} characters")]
    if any(char in value for char in "\r\n\x00"):
        return [ValidationError(field, "must not contain line breaks or NUL")]
    return []


def _object(payload: Mapping[str, Any], key: str) -> list[ValidationError]:
    if key in payload and payload[key] is not None and not isinstance(payload[key], Mapping):
        return [ValidationError(f"payload.{key}", "must be a JSON object")]
    return []


def _check_email(payload: Mapping[str, Any]) -> list[ValidationError]:
    errors: list[ValidationError] = []
    has_to = payload.get("to") is not None
    has_user = payload.get("to_user_id") is not None
    if not has_to and not has_user:
        errors.append(ValidationError("payload.to", "give `to` (an address) or `to_user_id`"))
    if has_to:
        errors += _text(payload, "to", required=True, max_len=320)
        to = payload.get("to")
        if isinstance(to, str) and not errors and ("@" not in to or to.startswith("@")):
            errors.append(ValidationError("payload.to", f"{to[:60]!r} is not an email address"))
    if has_user and (
        isinstance(payload["to_user_id"], bool) or not isinstance(payload["to_user_id"], int | str)
    ):
        errors.append(ValidationError("payload.to_user_id", "must be an id (number or string)"))
    errors += _text(payload, "template", required=True, max_len=100)
    errors += _text(payload, "event_id", required=False, max_len=200)
    errors += _object(payload, "context")
    return errors


def _check_webhook(payload: Mapping[str, Any]) -> list[ValidationError]:
    errors = _text(payload, "endpoint", required=True, max_len=100)
    endpoint = payload.get("endpoint")
    if not errors and isinstance(endpoint, str) and not NAME_PATTERN.fullmatch(endpoint):
        errors.append(
            ValidationError("payload.endpoint", "must be an endpoint name (a-z 0-9 . _ -)")
        )
    errors += _text(payload, "event", required=True, max_len=200)
    # Neither is fine (the event is sent with `{}` as its data).
    if "data" in payload and "data_ref" in payload:
        errors.append(ValidationError("payload.data_ref", "give `data` or `data_ref`, not both"))
    errors += _object(payload, "data_ref")
    return errors


def _check_report(payload: Mapping[str, Any]) -> list[ValidationError]:
    return _text(payload, "report", required=True, max_len=100) + _object(payload, "params")


register_payload_check("email.send", _check_email)
register_payload_check("webhook.deliver", _check_webhook)
register_payload_check("report.generate", _check_report)
