"""Structured logs: one JSON object per record with the job fields, secrets masked."""

from __future__ import annotations

import json
import logging
import sys

from jobdesk.worker.logs import JsonFormatter, TextFormatter

#: 2026-01-02 04:05:06.780 UTC: no digits a secret below is made of, in UTC or local time.
FIXED_TIME = 1767326706.78


def job_record(message: str, **extra: object) -> logging.LogRecord:
    # A fixed time: a timestamp of "now" could contain a secret's digits ("…:00.333").
    record = logging.makeLogRecord(
        {
            "name": "jobdesk.worker",
            "levelno": logging.WARNING,
            "levelname": "WARNING",
            "created": FIXED_TIME,
            "msecs": 780.0,
        }
    )
    record.msg = message
    record.__dict__.update(extra)
    return record


FIELDS = {
    "action": "job_finished",
    "job_id": 42,
    "job_type": "webhook.deliver",
    "attempt": 3,
    "duration_ms": 1234.5,
    "outcome": "failed",
    "error": "401 for https://crm.example/hook?token=abcdef123456 "
    "Authorization: Bearer abcdefghijkl",
}


def test_json_is_one_line_with_the_job_fields_and_no_secrets() -> None:
    line = JsonFormatter().format(job_record("job 42 failed: password=hunter2", **FIELDS))
    assert "\n" not in line
    data = json.loads(line)
    assert data["action"] == "job_finished"
    assert (data["job_id"], data["job_type"], data["attempt"]) == (42, "webhook.deliver", 3)
    assert data["duration_ms"] == 1234.5
    assert data["outcome"] == "failed"
    assert data["level"] == "warning"
    assert "hunter2" not in line
    assert "abcdef123456" not in line
    assert "abcdefghijkl" not in line
    assert "token=***" in data["error"]


def test_json_masks_tracebacks() -> None:
    try:
        raise RuntimeError("connect to postgresql://app:s3cretpw@db/app failed")
    except RuntimeError:
        record = job_record("boom", action="job_crashed")
        record.exc_info = sys.exc_info()
    data = json.loads(JsonFormatter().format(record))
    assert "s3cretpw" not in data["exc"]
    assert "RuntimeError" in data["exc"]


def test_text_is_human_readable_and_masked() -> None:
    text = TextFormatter().format(job_record("job 42 failed", **FIELDS))
    assert "WARNING" in text
    assert "jobdesk.worker: job 42 failed" in text
    assert "action=job_finished" in text
    assert "job_type=webhook.deliver" in text
    assert "abcdef123456" not in text
    assert not text.lstrip().startswith("{")


class Opaque:
    """An object whose str() carries a secret (json.dumps(default=str) used it raw)."""

    def __str__(self) -> str:
        return "Client(url=https://api.example/x?api_key=opaque-key-999)"


NESTED = {
    "request": {
        "url": "https://crm.example/hook?token=nested-token-111",
        "headers": {"Authorization": "Bearer nested-bearer-222", "Accept": "*/*"},
        "body": [{"password": "nested-pw-333"}, "key=nested-key-444"],
    },
    "auth": ("Bearer tuple-bearer-555",),
    "client": Opaque(),
    "oauth": {"client_secret": "cs-secret-777", "scope": "read"},
    "api_key": "top-level-666",
    "attempt": 3,
}
SECRETS = ("111", "222", "333", "444", "555", "666", "777", "999")


def test_json_masks_nested_extras() -> None:
    """Issue 12 #14: only top-level string extras were masked."""
    line = JsonFormatter().format(job_record("request failed", **NESTED))
    for secret in SECRETS:
        assert secret not in line, secret
    data = json.loads(line)
    assert data["request"]["headers"]["Accept"] == "*/*"
    assert data["request"]["headers"]["Authorization"] == "***"
    assert data["request"]["url"] == "https://crm.example/hook?token=***"
    assert data["attempt"] == 3


def test_text_masks_nested_extras() -> None:
    text = TextFormatter().format(job_record("request failed", **NESTED))
    for secret in SECRETS:
        assert secret not in text, secret
    assert "attempt=3" in text


PEM_BODY = "MIIEpAIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB"
PEM = f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}\n-----END PRIVATE KEY-----"
#: Issue 23 #5: what the first-space/first-quote rule and the missing PEM rule let through.
WHOLE_VALUES = {
    "login": "password=correct horse battery",
    "key_file": PEM,
    "cut_key": "-----BEGIN EC PRIVATE KEY-----\n" + PEM_BODY,
    "quoted": "{'passphrase': 'correct horse battery'}",
}
WHOLE_LEAKS = ("horse", "battery", PEM_BODY[:16])


def test_json_masks_whole_values_and_private_keys() -> None:
    record = job_record("login failed: password=correct horse battery", **WHOLE_VALUES)
    try:
        raise ValueError(f"could not load {PEM}")
    except ValueError:
        record.exc_info = sys.exc_info()
    line = JsonFormatter().format(record)
    for leak in WHOLE_LEAKS:
        assert leak not in line, leak
    data = json.loads(line)
    assert data["login"] == "password=***"
    assert data["message"] == "login failed: password=***"
    assert "PRIVATE KEY" in data["exc"]


def test_text_masks_whole_values_and_keeps_the_extras_after_a_secret() -> None:
    text = TextFormatter().format(
        job_record("login failed: password=correct horse battery", action="job_failed", n=3)
    )
    for leak in WHOLE_LEAKS:
        assert leak not in text, leak
    assert "password=***" in text
    assert "[action=job_failed n=3]" in text  # not swallowed by the masked value
    text = TextFormatter().format(job_record("loading key", **WHOLE_VALUES))
    for leak in WHOLE_LEAKS:
        assert leak not in text, leak


def test_a_huge_message_is_bounded_and_masked() -> None:
    message = "token=abc " + "x" * 1_000_000
    for formatter in (JsonFormatter(), TextFormatter()):
        line = formatter.format(job_record(message, detail=message))
        assert "abc" not in line
        assert len(line) < 3 * 40_000
        assert "1,000,010 characters in all" in line
