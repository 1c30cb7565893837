"""Keeping secrets out of storage and off the screen.

- `mask_text`: for errors and response bodies, applied at write time — Authorization
  headers, Bearer tokens, `token=`/`key=`/`password=` query parameters, passwords in
  URLs and card numbers (Luhn-checked) are replaced with `***`.
- `mask_payload`: for payloads at render time — values under secret-looking keys, and
  any string that `mask_text` would change; viewers additionally get masked emails.
- `sanitize_error`: NUL removed, invalid UTF-8 replaced, secrets masked, bounded length
  with the original length noted.
- `fingerprint`: a short stable hash of an error with the variable parts (numbers, ids,
  UUIDs, timestamps, quoted values) stripped, so the same failure groups together.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

MASK = "***"
MAX_ERROR_CHARS = 4000

_SECRET_KEY = re.compile(
    r"pass(word|wd)?|secret|token|authorization|api[_-]?key|access[_-]?key|private[_-]?key|"
    r"credential|card[_-]?number|^cvv$|^cvc$|^ssn$|session|cookie",
    re.IGNORECASE,
)
# The header's value is an optional scheme word plus the credential; only those are masked,
# so the rest of a one-line error message survives.
_AUTH_HEADER = re.compile(
    r"(?i)\b(authorization|proxy-authorization)([\"']?[ \t]*[:=][ \t]*[\"']?)"
    r"((?:[A-Za-z][A-Za-z0-9_-]*[ \t]+)?[^\s\"',;]+)"
)
_BEARER = re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}")
_QUERY_SECRET = re.compile(
    r"(?i)([?&;\s\"'{,]|^)((?:access_|api_|refresh_|id_)?(?:token|key|apikey|secret|password|passwd|pwd|signature|sig)"
    r"[\"']?\s*[=:]\s*[\"']?)([^&\s\"',;}]+)"
)
_URL_PASSWORD = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^/\s:@]+:)([^@\s/]+)(@)")
_CARD = re.compile(r"\b(?:\d[ -]?){12,18}\d\b")
_EMAIL = re.compile(r"\b([A-Za-z0-9._%+-])[A-Za-z0-9._%+-]*(@[A-Za-z0-9.-]+\.[A-Za-z]{2,})\b")

_FINGERPRINT_RULES = [
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I), "<uuid>"),
    (re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?"), "<ts>"),
    (re.compile(r"\b0x[0-9a-f]+\b", re.I), "<hex>"),
    (re.compile(r"\b[0-9a-f]{12,}\b", re.I), "<hex>"),
    (re.compile(r"'[^']*'|\"[^\"]*\""), "<str>"),
    (re.compile(r"\d+(\.\d+)?"), "<n>"),
    (re.compile(r"\s+"), " "),
]


def _luhn_ok(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        digit = int(char)
        if index % 2 == 1:
            digit *= 2
            if digit > 9:
                digit -= 9
        total += digit
    return total % 10 == 0


def _mask_card(match: re.Match[str]) -> str:
    digits = re.sub(r"\D", "", match.group(0))
    if 13 <= len(digits) <= 19 and _luhn_ok(digits):
        return MASK
    return match.group(0)


def mask_text(text: str) -> str:
    """Replace credentials and card numbers inside free text with `***`."""
    text = _AUTH_HEADER.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", text)
    text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{MASK}{m.group(3)}", text)
    text = _QUERY_SECRET.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    return _CARD.sub(_mask_card, text)


def mask_email(text: str) -> str:
    """`ana.lopez@example.com` → `a***@example.com`."""
    return _EMAIL.sub(lambda m: f"{m.group(1)}{MASK}{m.group(2)}", text)


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(key))


def mask_payload(value: Any, *, mask_emails: bool = False) -> Any:
    """A copy of a JSON value with secrets (and optionally emails) masked."""
    if isinstance(value, Mapping):
        return {
            key: MASK
            if isinstance(key, str) and is_secret_key(key) and item not in (None, "")
            else mask_payload(item, mask_emails=mask_emails)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [mask_payload(item, mask_emails=mask_emails) for item in value]
    if isinstance(value, str):
        masked = mask_text(value)
        return mask_email(masked) if mask_emails else masked
    return value


def sanitize_error(raw: str | bytes | None, limit: int = MAX_ERROR_CHARS) -> str | None:
    """Make an error message safe to store: valid UTF-8, no NUL, masked, bounded."""
    if raw is None:
        return None
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    original_length = len(text)
    text = text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "")
    text = mask_text(text)
    if len(text) > limit:
        text = f"{text[:limit]}… [truncated; {original_length:,} characters in all]"
    return text


def fingerprint(error: str | None) -> str | None:
    """A 16-hex-digit hash of the error with its variable parts removed."""
    if not error:
        return None
    normalised = error.splitlines()[0] if error.strip() else error
    # The exception type and message carry the identity; stack lines and ids do not.
    for pattern, replacement in _FINGERPRINT_RULES:
        normalised = pattern.sub(replacement, normalised)
    normalised = normalised.strip().lower()[:500]
    return hashlib.sha256(normalised.encode("utf-8")).hexdigest()[:16]
