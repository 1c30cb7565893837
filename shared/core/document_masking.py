"""A stored JSON document (payload, result) as text with its secrets masked, key-aware —
also when the text does not decode (not JSON, nested too deeply).

`mask_document_text` is what the raw download of a document serves: a document that
decodes is masked exactly as the job page masks it (`masking.mask_payload`) and encoded
again; one that does not is walked token by token (`_mask_tokens`) without decoding it:

- the value after a key that `is_secret_key` names — a string, a number, a literal or a
  whole object or array, however deep — becomes `"***"` (`null` and `""` stay);
- every other string is masked like a payload string (`mask_text`, and emails for
  viewers), integers that are card numbers become `"***"`;
- anything between strings that is not JSON at all is masked as free text.

The walk keeps one counter for the depth of a skipped value, never a stack: linear time
and memory whatever the nesting.
"""

from __future__ import annotations

import json
import re

from jobdesk.shared.core.documents import decode_document
from jobdesk.shared.core.masking import (
    MASK,
    is_card_number,
    is_secret_key,
    mask_email,
    mask_payload,
    mask_text,
)

_MASKED_VALUE = json.dumps(MASK)
# A string (closed, or running to the end of a cut text), one structural character,
# whitespace, or a run of anything else. Every alternative consumes what it starts, so
# `finditer` walks the text once.
_TOKEN = re.compile(r"\"[^\"\\]*(?:\\[\s\S][^\"\\]*)*(?:\"|\\?\Z)|[{}\[\]:,]|\s+|[^\"{}\[\]:,\s]+")
_OPENERS = "{["
_CLOSERS = "}]"


def mask_document_text(text: str, *, mask_emails: bool = False) -> str:
    """The stored document `text` with its secrets (and, for viewers, emails) masked."""
    decoded = decode_document(text)
    if decoded.problem is None:
        masked = mask_payload(decoded.value, mask_emails=mask_emails)
        return json.dumps(masked, ensure_ascii=False)
    return "".join(_mask_tokens(text, mask_emails=mask_emails))


def _mask_string(piece: str, mask_emails: bool) -> str:
    """A JSON string token with its content masked like a payload string."""
    if "\\" not in piece and len(piece) >= 2 and piece[-1] == '"':  # no escapes: as is
        content = piece[1:-1]
        masked = mask_text(content)
        if mask_emails:
            masked = mask_email(masked)
        return piece if masked == content else json.dumps(masked, ensure_ascii=False)
    try:
        value = json.loads(piece)
    except ValueError:  # unterminated or with a broken escape: masked as it stands
        value = None
    if isinstance(value, str):
        masked = mask_text(value)
        if mask_emails:
            masked = mask_email(masked)
        return piece if masked == value else json.dumps(masked, ensure_ascii=False)
    masked = mask_text(piece)
    return mask_email(masked) if mask_emails else masked


def _key_of(piece: str) -> str:
    try:
        key = json.loads(piece)
    except ValueError:
        key = piece.strip('"')
    return key if isinstance(key, str) else piece


def _mask_tokens(text: str, *, mask_emails: bool) -> list[str]:
    walk = _Walk(mask_emails)
    for match in _TOKEN.finditer(text):
        walk.take(match.group())
    return walk.finish()


class _Walk:
    """The state of one walk over a document's tokens (see the module)."""

    def __init__(self, mask_emails: bool) -> None:
        self.mask_emails = mask_emails
        self.masked: dict[str, str] = {}  # token or loose text → masked: repeats are common
        self.out: list[str] = []
        self.loose: list[str] = []  # text outside strings, masked as free text at a flush
        self.held: str | None = None  # a string that is a key if a `:` follows it
        self.held_space = ""  # whitespace after the held string
        self.secret_value = False  # the next value belongs to a secret key
        self.skipping = 0  # depth inside a secret object or array being left out

    def flush(self, *then: str) -> None:
        if self.loose:
            text = "".join(self.loose)
            masked = self.masked.get(text)
            if masked is None:
                masked = self.masked[text] = mask_text(text)
            self.out.append(masked)
            self.loose.clear()
        self.out.extend(then)

    def take(self, piece: str) -> None:
        first = piece[0]
        if self.skipping:
            self.skipping += (first in _OPENERS) - (first in _CLOSERS)
        elif first.isspace():
            if self.held is None:
                self.loose.append(piece)
            else:
                self.held_space += piece
        elif self.held is not None and piece == ":":
            self.secret_value = is_secret_key(_key_of(self.held))
            self.flush(self.held)
            self.loose.extend((self.held_space, piece))
            self.held, self.held_space = None, ""
        else:
            if self.held is not None:  # not followed by a colon: a value
                self.flush(self.string(self.held))
                self.loose.append(self.held_space)
                self.held, self.held_space = None, ""
            self.value_or_structure(piece)

    def value_or_structure(self, piece: str) -> None:
        first = piece[0]
        if self.secret_value:
            self.secret_value = False
            if first not in _CLOSERS and piece not in (":", ","):  # the secret value
                if piece in ("null", '""'):
                    self.loose.append(piece)  # nothing to hide, as on the job page
                else:
                    self.flush(_MASKED_VALUE)
                    self.skipping = int(first in _OPENERS)
                return
        if first == '"':
            self.held = piece
        elif piece.isdigit() and is_card_number(piece):
            self.flush(_MASKED_VALUE)
        else:
            self.loose.append(piece)

    def finish(self) -> list[str]:
        self.flush()
        if self.held is not None:
            self.out.extend((self.string(self.held), self.held_space))
        return self.out

    def string(self, piece: str) -> str:
        masked = self.masked.get(piece)
        if masked is None:
            masked = self.masked[piece] = _mask_string(piece, self.mask_emails)
        return masked
