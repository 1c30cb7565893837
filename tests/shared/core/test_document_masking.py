"""Stored documents as text (the raw downloads), masked by key like the job page masks
them — also when the text does not decode (issue 23 #6)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from jobdesk.shared.core.document_masking import mask_document_text
from jobdesk.shared.core.masking import mask_payload

PEM_BODY = "MIIEpAIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB"
PEM = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----"

SECRETS = {
    "Cookie": "sessionid=abc123def; csrftoken=zz99",
    "passphrase": "correct horse battery",
    "signing": {"private_key": PEM, "note": "kept"},
    "nested": [{"password": "pw-456"}, {"x-api-key": 778899}],
    "card": 4111111111111111,
    "to": "ana.lopez@example.com",
}
LEAKS = ("abc123def", "zz99", "horse", PEM_BODY[:12], "pw-456", "778899", "4111111111111111")


def test_a_document_that_decodes_is_masked_like_the_page() -> None:
    text = json.dumps(SECRETS)
    masked = mask_document_text(text)
    assert json.loads(masked) == mask_payload(SECRETS)
    for leak in LEAKS:
        assert leak not in masked
    assert "ana.lopez@example.com" in masked
    assert "ana.lopez" not in mask_document_text(text, mask_emails=True)


@pytest.mark.parametrize(
    "wrap",
    [
        lambda doc: "[" * 150 + doc + "]" * 150,  # deeper than a document may be
        lambda doc: doc[:-1],  # cut: not JSON
        lambda doc: doc + " trailing garbage password=hunter2 more",
        lambda doc: doc.replace(", ", ",\n  "),  # pretty-printed, then cut
    ],
)
def test_a_document_that_does_not_decode_is_still_masked_by_key(
    wrap: Callable[[str], str],
) -> None:
    text = wrap(json.dumps(SECRETS))
    masked = mask_document_text(text, mask_emails=True)
    for leak in (*LEAKS, "hunter2", "ana.lopez"):
        assert leak not in masked, (leak, masked)
    assert '"note": "kept"' in masked or "kept" not in text


def test_a_secret_object_is_left_out_whole_however_deep() -> None:
    deep = '{"token": ' + "[" * 5000 + '"t0p"' + "]" * 5000 + ', "after": "shown"}'
    masked = mask_document_text("[" * 200 + deep + "]" * 200)
    assert "t0p" not in masked
    assert '"token": "***", "after": "shown"' in masked
