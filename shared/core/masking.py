"""Keeping secrets out of storage and off the screen.

- `mask_text`: for errors and response bodies, applied at write time — Authorization
  and Cookie headers, Bearer tokens, any `name=value` / `name: value` whose name says
  secret (`client_secret=`, `X-Api-Key:`, `"clientSecret":`, `AWS_SECRET_ACCESS_KEY=`),
  known token shapes (`whsec_…`, `sk_live_…`, GitHub/GitLab/Slack tokens, AWS key ids,
  JWTs), passwords in URLs and card numbers (Luhn-checked) are replaced with `***`.
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
    r"signing[_-]?key|credential|signature|card[_-]?number|^cvv$|^cvc$|^ssn$|session|cookie",
    re.IGNORECASE,
)
# The header's value is an optional scheme word plus the credential; only those are masked,
# so the rest of a one-line error message survives.
_AUTH_HEADER = re.compile(
    r"(?i)\b(authorization|proxy-authorization)([\"']?[ \t]*[:=][ \t]*[\"']?)"
    r"((?:[A-Za-z][A-Za-z0-9_-]*[ \t]+)?[^\s\"',;]+)"
)
# Headers whose whole value is a credential list (cookies): masked up to the line's end
# or the closing quote.
_COOKIE_HEADER = re.compile(r"(?i)\b((?:set-)?cookie[\"']?[ \t]*:[ \t]*)([^\r\n\"']+)")
_BEARER = re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}")
# `name=value` / `name: value` / `"name": "value"` where the name says secret: the
# secret word may sit anywhere in it (`client_secret`, `AWS_SECRET_ACCESS_KEY`,
# `X-Api-Key`, `private_token`, `clientSecret`); a bare `key`/`sig`/`pwd` counts too.
_CREDENTIAL_NAMES = (
    r"[A-Za-z0-9_.-]*?(?:secret|token(?!s)|passw(?:or)?d|api[_-]?key|apikey|access[_-]?key|"
    r"private[_-]?key|signing[_-]?key|client[_-]?key|credentials?|signature)[A-Za-z0-9_.-]*"
    r"|key|sig|pwd|auth"
)
_QUERY_SECRET = re.compile(
    rf"(?i)([?&;\s\"'{{,(]|^)((?:{_CREDENTIAL_NAMES})[\"']?\s*[=:]\s*[\"']?)([^&\s\"',;}}]+)"
)
# Credentials recognisable by their shape wherever they appear.
_KNOWN_TOKENS = re.compile(
    r"\b(?:whsec_[A-Za-z0-9+/=]{16,}"  # Standard Webhooks signing secrets
    r"|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}"  # Stripe secret / restricted keys
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"  # GitHub tokens
    r"|glpat-[A-Za-z0-9_-]{20,}"  # GitLab
    r"|xox[abprs]-[A-Za-z0-9-]{10,}"  # Slack
    r"|AKIA[0-9A-Z]{16}"  # AWS access key ids
    r"|AIza[0-9A-Za-z_-]{35}"  # Google API keys
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})"  # JWTs
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
    text = _COOKIE_HEADER.sub(lambda m: f"{m.group(1)}{MASK}", text)
    text = _KNOWN_TOKENS.sub(MASK, text)
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
