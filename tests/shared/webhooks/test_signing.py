"""Standard Webhooks signing and the receiver-side `verify()`."""

from __future__ import annotations

import base64
import time

import pytest

from jobdesk.shared.webhooks.signing import (
    WebhookVerificationError,
    generate_secret,
    secret_key,
    sign,
    signed_headers,
    verify,
)

# The example from the Standard Webhooks specification.
SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPEC_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SPEC_TIMESTAMP = 1614265330
SPEC_BODY = b'{"test": 2432232314}'
SPEC_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_signature_matches_the_specification_example() -> None:
    assert sign(SPEC_SECRET, SPEC_ID, SPEC_TIMESTAMP, SPEC_BODY) == SPEC_SIGNATURE


def test_verify_accepts_the_specification_example() -> None:
    headers = {
        "webhook-id": SPEC_ID,
        "webhook-timestamp": str(SPEC_TIMESTAMP),
        "webhook-signature": SPEC_SIGNATURE,
    }
    assert verify(SPEC_SECRET, headers, SPEC_BODY, now=SPEC_TIMESTAMP + 10) == SPEC_ID


def test_generated_secret_has_at_least_24_random_bytes() -> None:
    secret = generate_secret()
    assert secret.startswith("whsec_")
    assert len(secret_key(secret)) >= 24
    assert generate_secret() != secret
    with pytest.raises(ValueError):
        generate_secret(16)


def _headers(secrets: list[str], body: bytes, timestamp: int | None = None) -> dict[str, str]:
    return signed_headers(secrets, "msg_1", body, timestamp=timestamp).as_dict()


def test_rotation_signs_with_both_secrets_and_either_verifies() -> None:
    old, new = generate_secret(), generate_secret()
    headers = _headers([new, old], b"{}")
    assert len(headers["webhook-signature"].split(" ")) == 2
    assert verify(new, headers, b"{}") == "msg_1"
    assert verify(old, headers, b"{}") == "msg_1"
    with pytest.raises(WebhookVerificationError, match="no matching signature"):
        verify(generate_secret(), headers, b"{}")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda h, b: (h, b + b" "), "no matching signature"),
        (lambda h, b: ({**h, "webhook-id": "msg_2"}, b), "no matching signature"),
        (lambda h, b: ({k: v for k, v in h.items() if k != "webhook-id"}, b), "missing"),
        (lambda h, b: ({**h, "webhook-timestamp": "soon"}, b), "not an integer"),
        (lambda h, b: ({**h, "webhook-signature": "v1,AAAA"}, b), "no matching signature"),
    ],
)
def test_verify_refuses_tampering(mutate: object, message: str) -> None:
    secret = generate_secret()
    headers, body = mutate(_headers([secret], b'{"a":1}'), b'{"a":1}')  # type: ignore[operator]
    with pytest.raises(WebhookVerificationError, match=message):
        verify(secret, headers, body)


def test_verify_refuses_old_and_future_timestamps() -> None:
    secret = generate_secret()
    now = int(time.time())
    for skew in (-301, 301):
        headers = _headers([secret], b"{}", timestamp=now + skew)
        with pytest.raises(WebhookVerificationError, match="tolerance"):
            verify(secret, headers, b"{}", now=now)
    assert verify(secret, _headers([secret], b"{}", timestamp=now - 299), b"{}", now=now)


@pytest.mark.parametrize("timestamp", ["9" * 400, "-" + "9" * 400, "1" + "0" * 309, "9" * 5000])
def test_an_absurd_timestamp_is_a_verification_error(timestamp: str) -> None:
    """A 400-digit timestamp raised OverflowError (int to float) out of `verify()`."""
    secret = generate_secret()
    headers = {**_headers([secret], b"{}"), "webhook-timestamp": timestamp}
    with pytest.raises(WebhookVerificationError, match=r"tolerance|not an integer"):
        verify(secret, headers, b"{}")


def test_headers_are_case_insensitive_and_secret_may_be_bare_base64() -> None:
    secret = generate_secret()
    headers = {k.title(): v for k, v in _headers([secret], b"x").items()}
    bare = secret.removeprefix("whsec_")
    assert verify(bare, headers, b"x") == "msg_1"
    assert base64.b64decode(bare)


def test_webhook_id_with_newline_is_refused() -> None:
    with pytest.raises(ValueError):
        signed_headers([generate_secret()], "msg\r\nX-Evil: 1", b"")
