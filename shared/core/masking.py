"""Keeping secrets out of storage and off the screen.

- `mask_text`: free text (errors, response bodies, log lines, keys, reasons) with every
  span a rule of `secret_spans` finds replaced by `***` — credentials after a
  credential name, Authorization and Cookie headers, Bearer tokens, known token shapes,
  URL passwords, PEM private keys, card numbers. Applied at write time to errors and
  response bodies, and again at render time wherever text is shown.
- `mask_payload`: a JSON value, key-aware — values under secret keys
  (`secret_names.is_secret_key`), integers that are card numbers, and inside every
  string whatever `mask_text` hides; viewers additionally get masked emails.
- `sanitize_error`: outside text made safe to store: cut to its limit FIRST (plus a
  margin, so a secret across the cut is still recognised and hidden whole), then NUL
  removed, invalid UTF-8 replaced, masked; the original length is noted.
- `fingerprint`: a short stable hash of an error with the variable parts (numbers, ids,
  UUIDs, timestamps, quoted values) stripped, so the same failure groups together.

Everything here is linear in the length of its input (see `secret_spans`): a receiver
or a payload crafted to make a regular expression backtrack costs what its length costs.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from jobdesk.shared.core.secret_names import is_secret_key
from jobdesk.shared.core.secret_spans import Span, is_card_number, secret_spans

__all__ = [
    "MASK",
    "MAX_ERROR_CHARS",
    "fingerprint",
    "is_card_number",
    "is_secret_key",
    "mask_email",
    "mask_payload",
    "mask_prefix",
    "mask_text",
    "masks_number",
    "sanitize_error",
]

MASK = "***"
MAX_ERROR_CHARS = 4000
#: How far past its limit a text is scanned before it is cut: a secret that starts
#: before the cut is recognised whole (names are at most 100 characters, token shapes
#: and card numbers under 64), and the last `_CUT_TAIL` characters scanned, where a
#: secret cut by the scan itself may hide unrecognised, are never shown.
_CUT_MARGIN = 256
_CUT_TAIL = 96

# The local part starts where a run of local-part characters starts (not inside one, so
# a long run is scanned once, not once per position); the domain ends in a TLD.
_EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+-])([A-Za-z0-9._%+-])[A-Za-z0-9._%+-]*(@[A-Za-z0-9.-]+\.[A-Za-z]{2,})\b"
)

# What ends the user info of a URL (`scheme://user:password@host/…`).
_URL_USER_INFO_END = re.compile(r"[@/\s]")

#: Errors longer than this are fingerprinted on their beginning only (stored errors are
#: shorter: `sanitize_error` cuts them to `MAX_ERROR_CHARS`).
_FINGERPRINT_SCAN = 2 * MAX_ERROR_CHARS
_FINGERPRINT_RULES = [
    # First: an address must not survive into the hash, where a viewer (who sees it
    # masked) could confirm a guess by hashing it (and it is a variable part anyway).
    (_EMAIL, "<email>"),
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I), "<uuid>"),
    (re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?"), "<ts>"),
    (re.compile(r"\b0x[0-9a-f]+\b", re.I), "<hex>"),
    (re.compile(r"\b[0-9a-f]{12,}\b", re.I), "<hex>"),
    (re.compile(r"'[^']*'|\"[^\"]*\""), "<str>"),
    (re.compile(r"\d+(\.\d+)?"), "<n>"),
    (re.compile(r"\s+"), " "),
]


def _merged(spans: list[Span]) -> list[Span]:
    """Overlapping and touching spans joined, in order."""
    merged: list[Span] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _render(text: str, spans: list[Span], stop: int) -> str:
    """`text[:stop]` with every span replaced by `MASK`; a span across `stop` is masked
    as a whole (nothing of it past its start is shown)."""
    parts: list[str] = []
    shown = 0
    for start, end in spans:
        if start >= stop:
            break
        parts.append(text[shown:start])
        parts.append(MASK)
        shown = end
        if end >= stop:
            return "".join(parts)
    parts.append(text[shown:stop])
    return "".join(parts)


def mask_text(text: str) -> str:
    """Replace credentials and card numbers inside free text with `***`."""
    spans = secret_spans(text)
    if not spans:
        return text
    return _render(text, _merged(spans), len(text))


def mask_email(text: str) -> str:
    """`ana.lopez@example.com` → `a***@example.com`."""
    if "@" not in text:
        return text
    return _EMAIL.sub(lambda m: f"{m.group(1)}{MASK}{m.group(2)}", text)


def masks_number(value: object) -> bool:
    """True for a JSON integer that is a card number (13-19 digits, Luhn-valid)."""
    return type(value) is int and value >= 0 and is_card_number(str(value))


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
    if masks_number(value):
        return MASK
    return value


def mask_prefix(text: str, limit: int) -> tuple[str, bool]:
    """The masked beginning of `text`, at most `limit` characters, and whether anything
    was left out. Only the first `limit + _CUT_MARGIN` characters are scanned, so the
    cost does not grow with the rest; a secret across any cut is hidden whole."""
    scanned = text[: limit + _CUT_MARGIN]
    return _masked_prefix(scanned, limit, cut_by_scan=len(text) > len(scanned))


def _masked_prefix(scanned: str, limit: int, *, cut_by_scan: bool) -> tuple[str, bool]:
    stop = len(scanned)
    if cut_by_scan:
        # Near the scan's own cut a secret may be too short to recognise: never shown;
        # nor a URL whose password the cut separated from its `@`.
        stop = max(stop - _CUT_TAIL, 0)
        url = scanned.rfind("://")
        if url >= 0 and not _URL_USER_INFO_END.search(scanned, url + 3):
            stop = min(stop, url)
    masked = _render(scanned, _merged(secret_spans(scanned)), stop)
    if cut_by_scan or len(masked) > limit:
        return masked[:limit], True
    return masked, False


def sanitize_error(raw: str | bytes | None, limit: int = MAX_ERROR_CHARS) -> str | None:
    """Make an error message safe to store: valid UTF-8, no NUL, masked, bounded.

    The text is cut before it is scanned (`mask_prefix`), so storing a 64 KiB response
    body costs what 4 KiB cost."""
    if raw is None:
        return None
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    original_length = len(text)
    scanned = text[: limit + _CUT_MARGIN]
    clean = scanned.encode("utf-8", "replace").decode("utf-8").replace("\x00", "")
    masked, cut = _masked_prefix(clean, limit, cut_by_scan=len(text) > len(scanned))
    if cut:
        masked = f"{masked}… [truncated; {original_length:,} characters in all]"
    return masked


def fingerprint(error: str | None) -> str | None:
    """A 16-hex-digit hash of the error with its variable parts removed."""
    if not error:
        return None
    head = error[:_FINGERPRINT_SCAN]
    normalised = head.splitlines()[0] if head.strip() else head
    # The exception type and message carry the identity; stack lines and ids do not.
    for pattern, replacement in _FINGERPRINT_RULES:
        normalised = pattern.sub(replacement, normalised)
    normalised = normalised.strip().lower()[:500]
    return hashlib.sha256(normalised.encode("utf-8")).hexdigest()[:16]
