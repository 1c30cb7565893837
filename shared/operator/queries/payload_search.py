"""Payload search: `payload=user_id=42 endpoint=crm` finds the jobs whose payload has
every one of those key/value pairs — the term syntax, who may search what, and the SQL.

Syntax: terms separated by spaces, each `path=value`. A path is a key, or a key and a
key inside it (`customer.id=7`); keys use a-z A-Z 0-9 _ -. Values match JSON scalars:

- `endpoint=crm`: the string "crm";
- `user_id=42`: the number 42 (and 42.0) *or* the string "42" — a customer's id is
  often stored either way, and whoever searches means the id, not its JSON type;
  likewise `active=true` / `parent=null` match the literal or its spelling as a string;
- `user_id="42"`, `name="Ana Lopez"`: quoted (a JSON string), only that string.

Arrays and objects are not values; an element of an array is not found by its key.
At most `MAX_TERMS` terms; a term is at most `MAX_TERM_CHARS` characters as typed and the
whole search `MAX_QUERY_CHARS` — checked before any parsing, and the tokenizer reads
each character once, so no search costs more than a glance however it is written.

Indexed on both databases: PostgreSQL answers each term with JSONB containment
(`payload @> '{"user_id": 42}'`) from the GIN index `ix_jobdesk_jobs_payload`; SQLite
probes the terms table that triggers keep (`core.payload_terms`).

Masked values cannot be probed: whoever cannot see a value on the job's page must not
learn it by searching for it and seeing a job come back. Secrets are masked for
everyone, so a term whose key (at any level) is a secret key, or whose value the
masking would change (a token, a card number), is refused for everyone; emails are
masked for viewers, so viewers may not search for one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

import sqlalchemy as sa

from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.core.masking import is_secret_key, mask_email, mask_text, masks_number
from jobdesk.shared.core.payload_terms import MAX_VALUE_CHARS

PARAMETER = "payload"
MAX_TERMS = 5
#: A term as typed: a two-level path (201), `=`, a quoted 200-character value with room
#: for its escapes.
MAX_TERM_CHARS = 600
#: The whole search as typed: five terms of a usual size and the spaces between them.
MAX_QUERY_CHARS = 2000
#: A key and at most one key inside it: what the SQLite terms table indexes.
MAX_DEPTH = 2
_KEY = re.compile(r"[A-Za-z0-9_-]{1,100}")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_LITERALS: dict[str, bool | None] = {"true": True, "false": False, "null": None}
_BIGINT = 2**63

Scalar = str | int | float | bool | None


@dataclass(frozen=True, slots=True)
class Term:
    """`path` = `value`; `spelled`: an unquoted literal, which also matches its text."""

    path: tuple[str, ...]
    value: Scalar
    spelled: str | None = None

    @property
    def candidates(self) -> tuple[Scalar, ...]:
        """The JSON values this term accepts."""
        return (self.value,) if self.spelled is None else (self.value, self.spelled)

    def __str__(self) -> str:
        key = ".".join(self.path)
        if self.spelled is not None:
            return f"{key}={self.spelled}"
        assert isinstance(self.value, str)
        if _needs_quotes(self.value):
            return f"{key}={json.dumps(self.value, ensure_ascii=False)}"
        return f"{key}={self.value}"


def _needs_quotes(text: str) -> bool:
    """Whether a string must be quoted to be read back as that same string."""
    return (
        not text
        or text in _LITERALS
        or bool(_NUMBER.fullmatch(text))
        or any(char.isspace() or char == '"' for char in text)
    )


def _value(raw: str) -> tuple[Scalar, str | None]:
    if raw.startswith('"'):
        try:
            text = json.loads(raw)
        except ValueError:
            raise ValidationError(PARAMETER, f"{raw[:40]} is not a valid quoted string") from None
        return text, None
    if raw in _LITERALS:
        return _LITERALS[raw], raw
    if _NUMBER.fullmatch(raw):
        number: int | float
        if any(char in raw for char in ".eE"):
            number = float(raw)
            if number in (float("inf"), float("-inf")):
                raise ValidationError(PARAMETER, f"{raw[:40]} is too large a number")
        else:
            number = int(raw)
            if not -_BIGINT <= number < _BIGINT:
                raise ValidationError(PARAMETER, f"{raw[:40]} does not fit in 64 bits")
        return number, raw
    return raw, None


def _not_a_term(rest: str) -> ValidationError:
    return ValidationError(
        PARAMETER,
        f'{rest.strip()[:40]!r} is not a key=value term (e.g. user_id=42 or name="Ana Lopez")',
    )


def _tokens(raw: str) -> Iterator[tuple[str, str]]:
    """(path, value as typed) for each `path=value` of `raw`, left to right.

    One pass, each character looked at once (a backtracking pattern here cost seconds a
    request on a long term). A path runs up to `=` (no space or quote in it); a value is
    a JSON string in quotes (`\\"` escapes a quote) or runs up to the next space; a term
    ends at a space or the end. Anything else raises, quoting from where it went wrong.
    """
    end = len(raw)
    index = 0
    while True:
        while index < end and raw[index].isspace():
            index += 1
        if index == end:
            return
        start = index
        while index < end and not raw[index].isspace() and raw[index] not in '="':
            index += 1
        if index in (start, end) or raw[index] != "=":
            raise _not_a_term(raw[start:])
        path = raw[start:index]
        index += 1
        value_start = index
        if index < end and raw[index] == '"':
            index += 1
            while index < end and raw[index] != '"':
                index += 2 if raw[index] == "\\" else 1
            if index >= end:
                raise _not_a_term(raw[start:])
            index += 1
        else:
            while index < end and not raw[index].isspace() and raw[index] != '"':
                index += 1
        if index == value_start or (index < end and not raw[index].isspace()):
            raise _not_a_term(raw[start:])
        if index - start > MAX_TERM_CHARS:
            raise ValidationError(
                PARAMETER,
                f"{raw[start : start + 40]!r}… is {index - start:,} characters long; a term "
                f"is limited to {MAX_TERM_CHARS:,}",
            )
        yield path, raw[value_start:index]


def parse_terms(raw: str | None) -> tuple[Term, ...]:
    """The terms of a `payload` parameter (empty for None); raises ValidationError."""
    if raw is None:
        return ()
    if len(raw) > MAX_QUERY_CHARS:
        raise ValidationError(
            PARAMETER,
            f"is {len(raw):,} characters long; a payload search is limited to "
            f"{MAX_QUERY_CHARS:,} characters ({MAX_TERMS} terms)",
        )
    terms: list[Term] = []
    for raw_path, raw_value in _tokens(raw):
        path = tuple(raw_path.split("."))
        if len(path) > MAX_DEPTH or not all(_KEY.fullmatch(key) for key in path):
            raise ValidationError(
                PARAMETER,
                f"{raw_path[:40]!r}: a key is a-z A-Z 0-9 _ - (up to 100), or two "
                "joined by a dot (customer.id)",
            )
        value, spelled = _value(raw_value)
        if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
            raise ValidationError(PARAMETER, f"a value is limited to {MAX_VALUE_CHARS} characters")
        if isinstance(value, str) and any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise ValidationError(PARAMETER, "a value must not contain control characters")
        if isinstance(value, str) and any("\ud800" <= c <= "\udfff" for c in value):
            # `"\ud800"` parses as JSON but is no text a database can store or compare.
            raise ValidationError(
                PARAMETER, "a value must not contain a lone surrogate (\\ud800-\\udfff)"
            )
        terms.append(Term(path, value, spelled))
    if len(terms) > MAX_TERMS:
        raise ValidationError(PARAMETER, f"has {len(terms)} terms; the limit is {MAX_TERMS}")
    return tuple(dict.fromkeys(terms))


def format_terms(terms: tuple[Term, ...]) -> str:
    """The inverse of `parse_terms`."""
    return " ".join(str(term) for term in terms)


def refuse_hidden(terms: tuple[Term, ...], *, mask_emails: bool) -> None:
    """Refuse terms about values the searcher would see masked (see the module)."""
    for term in terms:
        key = ".".join(term.path)
        if any(is_secret_key(part) for part in term.path):
            raise ValidationError(
                PARAMETER, f"cannot search {key!r}: its values are masked (a secret)"
            )
        for value in term.candidates:
            if masks_number(value):
                raise ValidationError(
                    PARAMETER, f"cannot search {key!r} for a card number: it is masked"
                )
            if not isinstance(value, str):
                continue
            if mask_text(value) != value:
                raise ValidationError(
                    PARAMETER, f"cannot search {key!r} for a value that is masked (a secret)"
                )
            if mask_emails and mask_email(value) != value:
                raise ValidationError(
                    PARAMETER, f"cannot search {key!r} for an email address: viewers see it masked"
                )


# --- SQL ---------------------------------------------------------------------------------


def payload_matches(conn: sa.Connection, term: Term) -> sa.ColumnElement[bool]:
    """Jobs whose payload holds `term` (one of its candidate values at its path)."""
    return driver(conn).payload_match(term.path, term.candidates)
