"""Standard Webhooks signatures: signing for senders, `verify()` for receivers.

The scheme (https://www.standardwebhooks.com/):

- secret: random bytes, written `whsec_<base64>`;
- headers: `webhook-id` (stable per event: the receiver's idempotency key),
  `webhook-timestamp` (unix seconds, new per attempt) and `webhook-signature`, a
  space-separated list of `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`.
  During a secret rotation the sender signs with both secrets, so a receiver holding
  either one accepts the request.

`verify()` is what a receiver runs: it checks the timestamp against a tolerance window
(replay protection) and compares signatures in constant time. It is written so a
receiver can copy this one module without the rest of Jobdesk. (The `standardwebhooks`
package implements the same scheme but drags in an HTTP client and date libraries.)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

SECRET_PREFIX = "whsec_"  # noqa: S105 (a format prefix, not a secret)
SECRET_BYTES = 32
MIN_SECRET_BYTES = 24
SIGNATURE_VERSION = "v1"
DEFAULT_TOLERANCE_SECONDS = 5 * 60

ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"


class WebhookVerificationError(ValueError):
    """The request is not a valid, fresh, correctly signed webhook."""


def generate_secret(nbytes: int = SECRET_BYTES) -> str:
    """A new signing secret, `whsec_` + base64 of `nbytes` random bytes (>= 24)."""
    if nbytes < MIN_SECRET_BYTES:
        raise ValueError(f"a webhook secret needs at least {MIN_SECRET_BYTES} random bytes")
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(nbytes)).decode("ascii")


def secret_key(secret: str) -> bytes:
    """The raw HMAC key of a `whsec_…` secret (a bare base64 string is accepted too)."""
    encoded = secret.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("webhook secret is not valid base64 after 'whsec_'") from None
    if not key:
        raise ValueError("webhook secret is empty")
    return key


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """`v1,<base64 signature>` for one secret."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return f"{SIGNATURE_VERSION},{base64.b64encode(digest).decode('ascii')}"


@dataclass(frozen=True)
class SignedHeaders:
    msg_id: str
    timestamp: int
    signature: str

    def as_dict(self) -> dict[str, str]:
        return {
            ID_HEADER: self.msg_id,
            TIMESTAMP_HEADER: str(self.timestamp),
            SIGNATURE_HEADER: self.signature,
        }


def signed_headers(
    secrets_: Iterable[str], msg_id: str, body: bytes, *, timestamp: int | None = None
) -> SignedHeaders:
    """The three Standard Webhooks headers, signed with every given secret."""
    if not msg_id or any(c in msg_id for c in "\r\n\x00 "):
        raise ValueError("webhook-id must be non-empty without spaces or control characters")
    when = int(time.time()) if timestamp is None else int(timestamp)
    signatures = [sign(secret, msg_id, when, body) for secret in secrets_]
    if not signatures:
        raise ValueError("at least one secret is needed to sign a webhook")
    return SignedHeaders(msg_id, when, " ".join(signatures))


def _header(headers: Mapping[str, str], name: str) -> str:
    for key, value in headers.items():
        if key.lower() == name:
            return value
    raise WebhookVerificationError(f"missing {name} header")


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance: float = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> str:
    """Check a received webhook; returns its `webhook-id` (dedupe on it) or raises
    `WebhookVerificationError`.

    Receiver example::

        msg_id = verify(os.environ["CRM_WEBHOOK_SECRET"], request.headers, request.get_data())
        if already_processed(msg_id): return "", 204
    """
    msg_id = _header(headers, ID_HEADER)
    raw_timestamp = _header(headers, TIMESTAMP_HEADER)
    signature_list = _header(headers, SIGNATURE_HEADER)
    try:
        timestamp = int(raw_timestamp)
    except ValueError:
        raise WebhookVerificationError("webhook-timestamp is not an integer") from None
    current = time.time() if now is None else now
    try:
        skew = abs(current - timestamp)
    except OverflowError:  # hundreds of digits: no float holds it, no clock is near it
        skew = math.inf
    if skew > tolerance:
        raise WebhookVerificationError("webhook-timestamp outside the tolerance window")
    try:
        expected = sign(secret, msg_id, timestamp, body).encode("ascii")
    except ValueError as exc:
        raise WebhookVerificationError(str(exc)) from None
    matched = False
    for candidate in signature_list.split(" "):
        # Compare every candidate (no early exit) so timing reveals nothing either.
        if hmac.compare_digest(candidate.encode("utf-8", "replace"), expected):
            matched = True
    if not matched:
        raise WebhookVerificationError("no matching signature")
    return msg_id
