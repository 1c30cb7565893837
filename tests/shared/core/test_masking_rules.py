"""The masking rules of issue 23: whole values (spaces, quotes), PEM private keys, the
secret keys and token shapes that were missed, card numbers stored as JSON numbers, and
cutting before scanning without ever showing half a secret."""

from __future__ import annotations

import pytest

from jobdesk.shared.core.masking import (
    MASK,
    is_secret_key,
    mask_payload,
    mask_prefix,
    mask_text,
    sanitize_error,
)

PEM_BODY = "MIIEpAIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB"
PEM = (
    f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\naGVsbG8gd29ybGQ=\n-----END RSA PRIVATE KEY-----"
)


# --- item 5: a value is masked whole -----------------------------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("password=correct horse battery", f"password={MASK}"),
        ("login failed: password=correct horse battery", f"login failed: password={MASK}"),
        ('password="correct horse battery" for ana', f'password="{MASK}" for ana'),
        ("password='correct horse' user=ana", f"password='{MASK}' user=ana"),
        ("password=correct horse user=ana", f"password={MASK} user=ana"),
        ('{"passphrase": "correct horse battery", "user": "ana"}', None),
        ('{"pin": 1234, "user": "ana"}', f'{{"pin": {MASK}, "user": "ana"}}'),
        ("X-Api-Key: abc def ghi\nnext line", f"X-Api-Key: {MASK}\nnext line"),
        ('body {\\"client_secret\\": \\"a b c\\", \\"id\\": 1}', None),
        ("Cookie: sid=abc def; theme=dark x=1", f"Cookie: {MASK}"),
        ('{"Cookie": "sid=abc; csrftoken=zz99"}', f'{{"Cookie": "{MASK}"}}'),
        ("GET /cb?token=abc%20def&page=2 failed", f"GET /cb?token={MASK}&page=2 failed"),
    ],
)
def test_a_secret_value_is_masked_to_its_end(text: str, shown: str | None) -> None:
    masked = mask_text(text)
    for word in ("horse", "battery", "correct", "abc", "def", "ghi", "1234", "zz99", "a b c"):
        if word in text and word not in (shown or ""):
            assert word not in masked, (text, masked)
    if shown is not None:
        assert masked == shown


@pytest.mark.parametrize(
    "text",
    [
        PEM,
        f"ValueError: could not load key {PEM} (wrong format)",
        PEM.replace("\n", "\\n"),  # inside a JSON string or a repr
        "-----BEGIN PRIVATE KEY-----\n" + PEM_BODY,  # cut: no END line
        "-----BEGIN ENCRYPTED PRIVATE KEY-----" + PEM_BODY + "-----END ENCRYPTED PRIVATE KEY-----",
        "-----BEGIN OPENSSH PRIVATE KEY-----\n" + PEM_BODY + "\n-----END OPENSSH PRIVATE KEY-----",
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n"
        + PEM_BODY
        + "\n-----END PGP PRIVATE KEY BLOCK-----",
        "-----begin ec private key-----\n" + PEM_BODY,
    ],
)
def test_a_pem_private_key_body_is_masked(text: str) -> None:
    masked = mask_text(text)
    assert PEM_BODY not in masked
    assert PEM_BODY[:12] not in masked
    assert "aGVsbG8gd29ybGQ" not in masked
    assert "PRIVATE KEY" in masked.upper()  # the reader still learns what was there


def test_a_pem_key_keeps_what_follows_it_and_public_blocks_stay() -> None:
    masked = mask_text(f"load failed: {PEM} (wrong format)")
    assert masked.endswith("-----END RSA PRIVATE KEY----- (wrong format)")
    certificate = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----"
    assert mask_text(certificate) == certificate


@pytest.mark.parametrize(
    "text",
    [
        "key points: none",
        "tokens_left: none",
        "monkey=3 keyboard=us turkey: roast",
        "idempotency_key=welcome:42 group_key=user:42",
        "the password is not shown here",
        "KeyError: 'password'",
        "retry at 10:30:00, attempt 2 of 5",
        "https://example.com:8443/path?page=2",
    ],
)
def test_ordinary_text_stays(text: str) -> None:
    assert mask_text(text) == text


# --- item 7: more secret keys, shapes and numbers ----------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "key",
        "Key",
        "api_key",
        "apiKey",
        "secret_key",
        "encryption_key",
        "licenseKey",
        "hmac-key",
        "auth",
        "basic_auth",
        "proxyAuth",
        "pwd",
        "db_pwd",
        "pin",
        "card_pin",
        "pinCode",
        "otp",
        "otp_code",
        "TOTP",
        "passphrase",
        "ssh_passphrase",
        "sig",
        "Cookie",
        "password",
    ],
)
def test_secret_keys(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize(
    "key",
    [
        "monkey",
        "keyboard",
        "turkey",
        "keys",
        "key_id",
        "idempotency_key",
        "group_key",
        "concurrency_key",
        "sort_key",
        "partition_key",
        "author",
        "oauth_provider",
        "auth_method",
        "ping",
        "shipping",
        "spinner",
        "hotplate",
        "user_id",
        "endpoint",
    ],
)
def test_keys_that_are_not_secrets(key: str) -> None:
    assert not is_secret_key(key)


def test_mask_payload_masks_the_new_secret_keys_and_card_numbers_stored_as_numbers() -> None:
    payload = {
        "key": "k-123",
        "auth": "user:pass",
        "pwd": "p",
        "pin": 4321,
        "otp": "123456",
        "passphrase": "correct horse",
        "card": 4111111111111111,
        "amex": 378282246310005,
        "order_id": 1234567890123,  # 13 digits, not Luhn-valid
        "big": 9223372036854775807,
        "negative": -4111111111111111,
        "idempotency_key": "welcome:42",
        "monkey": "george",
        "count": 5,
        "flag": True,
    }
    masked = mask_payload(payload)
    for key in ("key", "auth", "pwd", "pin", "otp", "passphrase", "card", "amex"):
        assert masked[key] == MASK, key
    for key in ("order_id", "big", "negative", "idempotency_key", "monkey", "count", "flag"):
        assert masked[key] == payload[key], key
    assert mask_payload([4111111111111111, 1]) == [MASK, 1]


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (
            "openai said 401 for sk-proj-AbCdEf1234567890_GhIjKlMnOpQrStUvWxYz-0987",
            "AbCdEf1234567890",
        ),
        ("key sk-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefghij rejected", "AbCdEfGhIjKl"),
        (
            "POST https://hooks.slack.com/services/T0123ABCD/B0456EFGH/aBcDeFgHiJkLmNoPqRsTuVwX"
            " failed",
            "aBcDeFgHiJkLmNoPqRsTuVwX",
        ),
        (
            "https://discord.com/api/webhooks/123456789012345678/AbCdEfGhIjKlMnOp-qRsTuV",
            "AbCdEfGhIjKlMnOp",
        ),
        ("redis://:s3cr3t-pw@cache:6379/0 refused", "s3cr3t-pw"),
        ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjMifQ (no signature)", "eyJzdWIiOiIxMjMifQ"),
        ("temporary AWS key ASIAIOSFODNN7EXAMPLE", "ASIAIOSFODNN7EXAMPLE"),
    ],
)
def test_more_token_shapes(text: str, secret: str) -> None:
    masked = mask_text(text)
    assert secret not in masked, masked
    assert MASK in masked


def test_the_slack_webhook_url_keeps_its_host() -> None:
    masked = mask_text("https://hooks.slack.com/services/T0123ABCD/B0456EFGH/aBcDeFgHiJ")
    assert masked == f"https://hooks.slack.com/services/{MASK}"


# --- item 1: cut first, never half a secret ----------------------------------------------


def test_sanitize_error_scans_only_the_beginning_of_a_long_text() -> None:
    text = "HTTP 400: " + "x" * 10_000 + " password=hunter2"
    stored = sanitize_error(text, limit=100)
    assert stored is not None
    assert stored.startswith("HTTP 400: xxxx")
    assert stored.endswith("… [truncated; 10,027 characters in all]")
    assert len(stored) < 150


@pytest.mark.parametrize("offset", range(-40, 41, 3))
def test_a_secret_across_the_cut_is_masked_whole_or_not_shown(offset: int) -> None:
    """Wherever the limit falls inside a secret, no piece of it is stored."""
    secrets = {
        "card": "4111 1111 1111 1111",
        "token": "ghp_ABCDEFGHIJKLMNOPQRSTuvwxyz0123456789",
        "stripe": "sk_live_51Habcdefghijk",
        "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjMifQ.c2lnbmF0dXJlMTIz",
        "password": "password=hunter2-and-more",
    }
    limit = 200
    for name, secret in secrets.items():
        start = limit + offset
        text = "a" * start + " " + secret + " " + "b" * 5000
        stored = sanitize_error(text, limit=limit) or ""
        value = secret.split("=", 1)[-1]
        for size in (6, len(value) // 2):
            for at in range(len(value) - size + 1):
                piece = value[at : at + size]
                if piece.strip() and not set(piece) <= {"1", " "}:
                    assert piece not in stored, (name, offset, piece, stored[-80:])


def test_a_url_password_cut_from_its_at_sign_is_not_shown() -> None:
    """A long value masked before it shrinks the text: what is shown reaches towards
    the end of the scan, where a URL's password may have lost its `@` to the cut."""
    password = "p" * 300
    for before in (0, 60, 100, 140):
        text = f"password={'z' * before}\n postgresql://app:{password}@db/app {'y' * 1000}"
        stored = sanitize_error(text, limit=100) or ""
        assert "ppppp" not in stored, (before, stored)


def test_mask_prefix_bounds_and_masks() -> None:
    shown, cut = mask_prefix("token=abc " + "y" * 500, 50)
    assert shown.startswith(f"token={MASK}")
    assert len(shown) <= 50
    assert cut
    assert mask_prefix("short password=x", 50) == (f"short password={MASK}", False)
