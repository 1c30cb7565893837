"""Every function that masks or parses outside text runs in linear time.

Each is fed adversarial texts up to the size limits (a payload is at most 256 KiB) —
the issue's own response body, shapes found to make regular expressions backtrack, and
hypothesis-built repetitions of secret words, separators, quotes, digits, `@`, dashes
and line breaks — and each call must end within `BOUND_SECONDS` of CPU time. A linear
function takes milliseconds to a few tenths of a second for 256 KiB on this machine; a
quadratic one takes minutes (the regular expression of issue 23 needed ~40 s for 64 KiB).

CPU time of the calling thread is measured, not wall time: other processes on a
loaded machine do not make a linear function look slow; and with the coverage tracer
paused (`tests/cpu_time.py`): under `--cov` it, not the function, would be measured.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobdesk.shared.core.document_masking import mask_document_text
from jobdesk.shared.core.masking import (
    fingerprint,
    is_secret_key,
    mask_email,
    mask_payload,
    mask_prefix,
    mask_text,
    sanitize_error,
)
from jobdesk.shared.operator.queries.attempts import attempt_lines, split_error
from jobdesk.shared.operator.queries.payload_summary import summary_pairs
from jobdesk.shared.webhooks.deliveries import excerpt
from jobdesk.worker.jobs import email_provider
from jobdesk.worker.logs import JsonFormatter, TextFormatter
from tests.cpu_time import untraced_cpu_seconds

LIMIT = 256 * 1024
BOUND_SECONDS = 1.0
#: The response body of issue 23: a 400 with it held a worker's GIL for ~23 s.
ISSUE_BODY = " " + "secret" * 10900


def _record(text: str) -> logging.LogRecord:
    record = logging.LogRecord("jobdesk.worker", logging.WARNING, __file__, 1, text, None, None)
    record.action = "job_failed"
    record.request = {"headers": {"X-Note": text}}
    return record


def _summary(text: str) -> str:
    return json.dumps([[text[:1001], text[:200], "string"], ["n", text[:19], "number"]])


def _attempt(text: str) -> list[dict[str, object]]:
    return [{"attempt": 1, "outcome": "failed", "finished_at": datetime.now(UTC), "error": text}]


#: name → a call that masks or parses `text` the way the code base does.
TARGETS: dict[str, Callable[[str], object]] = {
    "mask_text": mask_text,
    "mask_email": mask_email,
    "mask_payload": lambda t: mask_payload({t[:1000]: t, "list": [t]}, mask_emails=True),
    "is_secret_key": is_secret_key,
    "sanitize_error": sanitize_error,
    "sanitize_error_bytes": lambda t: sanitize_error(t.encode("utf-8", "surrogatepass")),
    "mask_prefix": lambda t: mask_prefix(t, 4000),
    "fingerprint": fingerprint,
    "document": lambda t: mask_document_text(t, mask_emails=True),
    "document_json": lambda t: mask_document_text(json.dumps({"note": t}), mask_emails=True),
    "json_log": lambda t: JsonFormatter().format(_record(t)),
    "text_log": lambda t: TextFormatter().format(_record(t)),
    "webhook_excerpt": lambda t: excerpt(t.encode("utf-8", "surrogatepass")),
    "payload_summary": lambda t: summary_pairs(_summary(t), mask_emails=True),
    "traceback_folding": split_error,
    "attempt_lines": lambda t: attempt_lines(_attempt(t)),
    "smtp_reply": lambda t: email_provider._QUEUED_AS.search(email_provider._reply_text(t)),
}


def _within_bound(name: str, text: str) -> None:
    with untraced_cpu_seconds() as spent:
        TARGETS[name](text)
    assert spent[0] < BOUND_SECONDS, f"{name} took {spent[0]:.2f} s of CPU for {len(text):,} chars"


def _repeat(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


#: Shapes that made a rule backtrack at some point (the issue's, and those found while
#: fixing it), each at the size limit.
KNOWN_BAD = {
    "issue_body": ISSUE_BODY,
    "secret_words": " " + _repeat("secret", LIMIT),
    "secret_pairs": _repeat("secret=", LIMIT),
    "key_pairs": _repeat("key=x ", LIMIT),
    "spaces_after_password": "password=" + " " * LIMIT,
    "jwt_starts": _repeat("eyJ-", LIMIT),
    "email_dots": _repeat("a.", LIMIT),
    "email_ats": _repeat("a@", LIMIT),
    "scheme_dashes": _repeat("a-", LIMIT) + "://",
    "url_colons": "http://" + _repeat("a:", LIMIT),
    "pem_headers": _repeat("-----BEGIN PRIVATE KEY-----", LIMIT),
    "blank_lines": "Error: x\n" + "\n" * LIMIT,
    "long_frame": 'E: x\n  File "' + "a" * (LIMIT // 2) + '", line 1\n' + "    x\n" * 20000,
    "digits": _repeat("4", LIMIT),
    "digit_groups": _repeat("4111 ", LIMIT),
    "quotes": _repeat('"', LIMIT),
    "escaped_quotes": '"password": "' + _repeat('\\"', LIMIT),
    "strings": _repeat('"token"', LIMIT),
    "hex": _repeat("abcdef0123", LIMIT) + "g",
}


@pytest.mark.parametrize("shape", sorted(KNOWN_BAD))
@pytest.mark.parametrize("name", sorted(TARGETS))
def test_known_bad_shapes_take_linear_time(name: str, shape: str) -> None:
    _within_bound(name, KNOWN_BAD[shape])


def test_the_issue_body_is_masked_and_its_excerpt_bounded() -> None:
    with untraced_cpu_seconds() as spent:
        stored = excerpt(ISSUE_BODY.encode())
    assert spent[0] < 0.2
    assert stored is not None
    assert len(stored) < 2100
    assert mask_text(ISSUE_BODY) == ISSUE_BODY  # nothing in it is a secret


PIECES = [
    "secret",
    "token",
    "password",
    "passw",
    "key",
    "api_key",
    "auth",
    "pin",
    "cookie",
    "Authorization",
    "bearer",
    "=",
    ":",
    " ",
    "\t",
    "\n",
    '"',
    "'",
    "\\",
    ",",
    ";",
    "&",
    "?",
    "/",
    "://",
    "@",
    ".",
    "-",
    "_",
    "0",
    "4111",
    "1",
    "a",
    "Z",
    "é",
    "{",
    "}",
    "[",
    "]",
    "eyJ",
    "whsec_",
    "sk-",
    "ghp_",
    "xoxb-",
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----END",
    "hooks.slack.com/services/",
    "0x",
    '  File "',
    "Traceback (most recent call last):",
]


@st.composite
def adversarial_texts(draw: st.DrawFn) -> str:
    """A unit of 1-6 pieces repeated up to a size near a limit, with a random head and
    tail: repetition is what turns a backtracking pattern quadratic."""
    unit = "".join(draw(st.lists(st.sampled_from(PIECES), min_size=1, max_size=6)))
    size = draw(st.sampled_from([4096, 65536, LIMIT]))
    head = "".join(draw(st.lists(st.sampled_from(PIECES), max_size=8)))
    tail = "".join(draw(st.lists(st.sampled_from(PIECES), max_size=8)))
    return head + _repeat(unit, size) + tail


@pytest.mark.parametrize("name", sorted(TARGETS))
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(text=adversarial_texts())
def test_adversarial_texts_take_linear_time(name: str, text: str) -> None:
    _within_bound(name, text)


@settings(max_examples=60, deadline=None)
@given(text=st.lists(st.sampled_from(PIECES), max_size=40).map("".join))
def test_masking_any_text_returns_text_and_bounded_errors(text: str) -> None:
    assert isinstance(mask_text(text), str)
    assert isinstance(mask_document_text(text, mask_emails=True), str)
    stored = sanitize_error(text, limit=50)
    assert stored is not None
    assert "\x00" not in stored
    assert len(stored.split("… [truncated;")[0]) <= 50
