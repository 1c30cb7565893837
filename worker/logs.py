"""Log output of the worker process: readable text or one JSON object per line.

Every record Jobdesk logs carries an `action` key (`job_finished`, `lease_lost`,
`db_unavailable`, …) plus ids in `extra`; the JSON format puts them at the top level so
log pipelines can filter on them, the text format appends them as `key=value`. Both
mask secrets in the message, the traceback and every extra (`core.masking`), and carry
at most `MAX_TEXT_CHARS` of any one text.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

from jobdesk.shared.core.masking import MASK, is_secret_key, mask_prefix
from jobdesk.shared.core.secret_names import is_credential_name

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


#: How deep a nested extra is masked; anything deeper is replaced (a log line is not
#: the place for a 1,000-level structure).
MAX_EXTRA_DEPTH = 20
#: The most of one text (message, traceback, string extra) a log line carries: an
#: exception's message is outside text of any length, and it is masked only up to here.
MAX_TEXT_CHARS = 32 * 1024


def masked_text(text: str) -> str:
    """`text` masked, cut to `MAX_TEXT_CHARS` first (a secret across the cut is hidden)."""
    shown, cut = mask_prefix(text, MAX_TEXT_CHARS)
    return f"{shown}… [truncated; {len(text):,} characters in all]" if cut else shown


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD}


def masked(value: Any, depth: int = 0) -> Any:
    """A JSON-ready copy of a log extra with secrets masked at every depth: values under
    secret-looking keys become `***` (`masking.is_secret_key`), strings go through
    `masked_text`, and anything else that is not a plain number — an object, bytes,
    a set — is rendered with `str()` and masked as text (so `json.dumps(default=str)`
    never writes an unmasked string)."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return masked_text(value)
    if depth >= MAX_EXTRA_DEPTH:
        return "…"
    if isinstance(value, Mapping):
        return {
            str(key): MASK
            if is_secret_key(str(key)) and item not in (None, "")
            else masked(item, depth + 1)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple | set | frozenset):
        return [masked(item, depth + 1) for item in value]
    return masked_text(str(value))


def _masked_extras(record: logging.LogRecord) -> dict[str, Any]:
    result: dict[str, Any] = masked(_extras(record))
    return result


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": masked_text(record.getMessage()),
        }
        # Secrets can reach a log line through an error message or an extra value, at
        # any depth of it (`extra={"request": {"headers": {...}}}`).
        data.update(_masked_extras(record))
        if record.exc_info:
            data["exc"] = masked_text(self.formatException(record.exc_info))
        return json.dumps(data, default=str, ensure_ascii=False)


def _pair_value(key: str, value: Any) -> Any:
    """An extra's (already masked) value as `key=value` shows it: masked whole when the
    key reads as a credential in free text (`clientkey=`), as the text rules would."""
    return MASK if is_credential_name(key) and value not in (None, "") else value


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        # Masked before the extras go in: a secret in the message hides the rest of its
        # line, which must not take the extras (masked on their own, pair by pair) along.
        text = masked_text(super().format(record))
        extras = _masked_extras(record)
        if extras:
            pairs = " ".join(f"{k}={_pair_value(k, v)}" for k, v in extras.items())
            head, sep, rest = text.partition("\n")
            text = f"{head} [{pairs}]{sep}{rest}"
        return text


def configure(fmt: str = "text", level: str = "info", stream: TextIO | None = None) -> None:
    """Send Jobdesk's logs (and warnings from libraries) to `stream` (default stderr)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("jobdesk").setLevel(level.upper())
    # APScheduler logs every run at INFO; keep only its warnings.
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
