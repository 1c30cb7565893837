"""Secrets never reach storage or the screen; ordinary text and numbers survive."""

from __future__ import annotations

import pytest

from jobdesk.shared.core.masking import (
    MASK,
    fingerprint,
    mask_email,
    mask_payload,
    mask_text,
    sanitize_error,
)


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOjF9.sig", "eyJhbGciOiJIUzI1NiJ9"),
        ("authorization=Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA"),
        ("{'Authorization': 'Token abcdef123456'}", "abcdef123456"),
        ("Proxy-Authorization: Digest s3cr3tdigest", "s3cr3tdigest"),
        ("request failed: bearer sk_live_51Habcdefghijk", "sk_live_51Habcdefghijk"),
        ("GET https://x.test/cb?token=tok_9f8e7d6c&page=2", "tok_9f8e7d6c"),
        ("GET /v1/items?api_key=AKIA1234567890&x=1", "AKIA1234567890"),
        ("https://x.test/?key=k-123-secret", "k-123-secret"),
        ("login password=hunter2 rejected", "hunter2"),
        ('{"access_token": "ya29.a0AfH6SMB"}', "ya29.a0AfH6SMB"),
        ("postgresql://app:pa55w0rd@db.internal:5432/app", "pa55w0rd"),
        ("smtp://mailer:topsecret@smtp.example.com:587", "topsecret"),
        ("charge failed for card 4111 1111 1111 1111", "4111 1111 1111 1111"),
        ("card=4111-1111-1111-1111 declined", "4111-1111-1111-1111"),
        ("pan 5500005555555559 declined", "5500005555555559"),
        ("amex 378282246310005", "378282246310005"),
    ],
)
def test_secrets_are_masked(text: str, secret: str) -> None:
    masked = mask_text(text)
    assert secret not in masked
    assert MASK in masked


@pytest.mark.parametrize(
    "text",
    [
        "order 1234567890123 failed after 3 attempts",  # 13 digits, not Luhn-valid
        "HTTP 503 Service Unavailable after 30.5s",
        "user_id=42 template=welcome",
        "timestamp 1700000000123",
        "phone +1 555 0100",
        "tracking 4111111111111112",  # card length, fails Luhn
        "https://example.com/path?page=2&sort=asc",
        "key points: none",
    ],
)
def test_ordinary_text_and_numbers_are_kept(text: str) -> None:
    assert mask_text(text) == text


def test_masking_keeps_the_rest_of_the_message() -> None:
    masked = mask_text("Authorization: Bearer abcdefgh12345 rejected by upstream (401)")
    assert masked == f"Authorization: {MASK} rejected by upstream (401)"


def test_mask_payload_masks_secret_keys_at_any_depth_and_secrets_in_strings() -> None:
    payload = {
        "user_id": 42,
        "password": "hunter2",
        "api_key": "k",
        "empty_token": "",
        "headers": {"Authorization": "Bearer abc", "Accept": "application/json"},
        "steps": [{"url": "https://x.test/?token=abc123"}, {"card_number": 4111111111111111}],
        "note": "card 4111 1111 1111 1111",
        "to": "ana.lopez@example.com",
    }
    masked = mask_payload(payload)
    assert masked["user_id"] == 42
    assert masked["password"] == MASK
    assert masked["api_key"] == MASK
    assert masked["empty_token"] == ""
    assert masked["headers"] == {"Authorization": MASK, "Accept": "application/json"}
    assert masked["steps"][0]["url"] == f"https://x.test/?token={MASK}"
    assert masked["steps"][1]["card_number"] == MASK
    assert "4111" not in masked["note"]
    assert masked["to"] == "ana.lopez@example.com"
    assert mask_payload(payload, mask_emails=True)["to"] == f"a{MASK}@example.com"
    assert payload["password"] == "hunter2"  # the input is not modified


def test_mask_email() -> None:
    assert (
        mask_email("to ana.lopez@example.com and b@x.org")
        == f"to a{MASK}@example.com and b{MASK}@x.org"
    )


def test_sanitize_error_bounds_cleans_and_masks() -> None:
    assert sanitize_error(None) is None
    assert sanitize_error(b"bad \xff\xfe bytes\x00") == "bad \ufffd\ufffd bytes"
    assert sanitize_error("lone \udcff surrogate") == "lone ? surrogate"
    assert sanitize_error("x?password=abc") == f"x?password={MASK}"
    long = sanitize_error("y" * 5000, limit=100)
    assert long is not None
    assert long.startswith("y" * 100)
    assert long.endswith("[truncated; 5,000 characters in all]")
    assert sanitize_error("short", limit=100) == "short"


def test_fingerprint_groups_the_same_failure_with_different_details() -> None:
    a = fingerprint("TimeoutError: job 123 timed out after 10.5s at 2030-01-01T10:00:00Z")
    b = fingerprint("TimeoutError: job 98765 timed out after 3s at 2031-05-02T11:12:13Z")
    c = fingerprint("ConnectionRefusedError: [Errno 111] Connection refused")
    assert a == b
    assert a != c
    assert fingerprint("") is None
    assert fingerprint(None) is None
    assert len(a or "") == 16
    assert fingerprint("KeyError: 'user_7'\n  File x.py line 3") == fingerprint(
        "KeyError: 'user_9'"
    )


def test_an_email_in_an_error_does_not_reach_its_fingerprint() -> None:
    # Viewers see the address masked; a fingerprint of the line with the address in it
    # would let them confirm a guess by hashing it.
    a = fingerprint("SMTPRecipientsRefused: unknown mailbox ana.lopez@example.com")
    b = fingerprint("SMTPRecipientsRefused: unknown mailbox bob@example.org")
    assert a == b
    assert a == fingerprint("SMTPRecipientsRefused: unknown mailbox <email>")


#: B15: credential shapes an earlier rule set missed, each as it shows up in real errors.
B15 = [
    ("token endpoint said: client_secret=cs_9x8y7z6w5v is invalid", "cs_9x8y7z6w5v"),
    ("POST /v2/send?api-key=AK-778899aabb failed", "AK-778899aabb"),
    ("gitlab: private_token=glp_11223344 expired", "glp_11223344"),
    ("sent headers: X-Api-Key: xk-55aa66bb77cc", "xk-55aa66bb77cc"),
    ("upstream 401 (X-Auth-Token: at-0099887766)", "at-0099887766"),
    ("request Cookie: sessionid=abc123def; csrftoken=zz99", "sessionid=abc123def"),
    ("response Set-Cookie: sid=s3ss10n; Path=/; HttpOnly", "sid=s3ss10n"),
    ("env: AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCY", "wJalrXUtnFEMI/K7MDENG"),
    ('{"clientSecret": "cS-4455667788", "scope": "read"}', "cS-4455667788"),
    (
        "signing with whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw failed",
        "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    ),
    ("stripe error for sk_live_51H8abcdEFGHijkl (no such customer)", "51H8abcdEFGHijkl"),
    ("ghp_ABCDEFGHIJKLMNOPQRSTuvwxyz0123456789 rejected", "ABCDEFGHIJKLMNOPQRSTuvwxyz"),
    ("slack said invalid_auth for xoxb-1234567890-abcdefghij", "1234567890-abcdefghij"),
    ("aws key AKIAIOSFODNN7EXAMPLE is disabled", "AKIAIOSFODNN7EXAMPLE"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjMifQ.c2lnbmF0dXJlMTIz expired", "eyJzdWIiOiIxMjMifQ"),
    ("webhook to https://crm.test/hook?token=t0k3n-abc&x=1 timed out", "t0k3n-abc"),
]


@pytest.mark.parametrize(("text", "secret"), B15, ids=[row[1][:12] for row in B15])
def test_more_credential_shapes_are_masked(text: str, secret: str) -> None:
    masked = mask_text(text)
    assert secret not in masked, masked
    assert MASK in masked


@pytest.mark.parametrize(
    "text",
    [
        "tokens_left: none",
        "Set the header and retry",
        "the cookie jar is empty",
        "skipping sk_ prefix check",
        "template=welcome status=dead attempts=5",
    ],
)
def test_rules_keep_ordinary_text(text: str) -> None:
    assert mask_text(text) == text
