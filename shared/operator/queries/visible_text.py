"""What a reader sees of stored text, and so what their searches and filters may match.

Whoever cannot see a value on a page must not learn it by searching for it and seeing a
job come back. The pages show a stored error to viewers without its stack trace (file
paths and code lines of the server) and with email addresses masked (`a***@example.com`;
`core.masking` keeps secrets out of storage for everyone). So:

- **Error search** (`error=`): for viewers a job matches only when the search text is in
  `searchable_error(error)` — the error cut before anything that could be a stack, with
  the local part of every email-like `x…@` hidden — as well as in the stored text (which
  keeps the trigram index in use). The cut and the hiding are *conservative*: they hide
  at least what the pages hide (the first `File "` or `Traceback (most recent call
  last):` anywhere, every run of address characters before an `@`), so a viewer may miss
  a job whose error they could read, never find one through what they cannot. The same
  rule runs in SQL on both databases (`searchable_error_sql`): PostgreSQL `split_part` and
  one `regexp_replace`, SQLite this module's Python function.
- **Exact filters** on free-text keys (`key=`, `group=`, the audit log's `actor=`): a
  value the masking would change is refused — a secret for everyone, an email for
  viewers — so an exact match never confirms a guess at a masked value
  (`refuse_masked_value`). Pages link to such a key by job (`?key_of=<job id>`).
- The payload search applies the same rule to its terms (`operator.payload_search`).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.core.masking import mask_email, mask_text

TRACEBACK_HEADER = "Traceback (most recent call last):"
FRAME_START = 'File "'
#: What an email's local part may hold; a run of these before `@` is hidden.
_ADDRESS_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._%+-")
_HIDDEN = "***"
#: The same hiding in PostgreSQL's regular expressions (one pass, linear there).
_ADDRESS_RUN_SQL = "([A-Za-z0-9._%+-])[A-Za-z0-9._%+-]*@"
SQLITE_FUNCTION = "jobdesk_searchable_error"


def stack_start(text: str) -> int | None:
    """Where the stack trace of a stored error starts (None: it has none): the first
    line that is Python's `Traceback (most recent call last):` header, or that is
    whitespace followed by `File "` (a frame line; the whitespace may span empty lines,
    which is where such a stack then starts).

    One pass over the text: the regular expression this replaces
    (`^\\s+File "` with MULTILINE) re-read a long run of blank lines from every line in
    it, seconds of CPU for a page view."""
    found: int | None = None
    at = text.find(TRACEBACK_HEADER)
    while at != -1:
        if at == 0 or text[at - 1] == "\n":
            found = at
            break
        at = text.find(TRACEBACK_HEADER, at + 1)
    at = text.find(FRAME_START)
    while at != -1 and (found is None or at < found):
        run_start = at
        while run_start > 0 and text[run_start - 1].isspace():
            run_start -= 1
        # The first line start inside the whitespace run, still before `File "`.
        if run_start == 0 or text[run_start - 1] == "\n":
            line = run_start
        else:
            newline = text.find("\n", run_start, at)
            line = at if newline == -1 else newline + 1
        if line < at:
            return line if found is None else min(line, found)
        at = text.find(FRAME_START, at + 1)
    return found


def hide_address_runs(text: str) -> str:
    """Every run of email-address characters right before an `@` reduced to its first
    character and `***` (`ana.lopez@example.com` -> `a***@example.com`): at least what
    `mask_email` hides, whatever the domain looks like."""
    if "@" not in text:
        return text
    pieces = text.split("@")
    for number, piece in enumerate(pieces[:-1]):
        cut = len(piece)
        while cut > 0 and piece[cut - 1] in _ADDRESS_CHARS:
            cut -= 1
        if cut < len(piece):
            pieces[number] = piece[: cut + 1] + _HIDDEN
    return "@".join(pieces)


def searchable_error(text: str | None) -> str | None:
    """The part of a stored error a viewer's search may match (see the module)."""
    if text is None:
        return None
    for marker in (TRACEBACK_HEADER, FRAME_START):
        text = text.partition(marker)[0]
    return hide_address_runs(text)


def searchable_error_sql(
    conn: sa.Connection, column: sa.ColumnElement[Any]
) -> sa.ColumnElement[str]:
    """`searchable_error(column)` in SQL on `conn`'s database: the same rule in each
    database's own terms."""
    spelled = driver(conn).choose(postgresql=_postgresql_rule, sqlite=_sqlite_rule)
    return spelled(conn, column)


def _postgresql_rule(conn: sa.Connection, column: sa.ColumnElement[Any]) -> sa.ColumnElement[str]:
    # split_part cuts at the markers; the regular expression runs in linear time there.
    head = sa.func.split_part(sa.func.split_part(column, TRACEBACK_HEADER, 1), FRAME_START, 1)
    return sa.func.regexp_replace(head, _ADDRESS_RUN_SQL, "\\1" + _HIDDEN + "@", "g", type_=sa.Text)


def _sqlite_rule(conn: sa.Connection, column: sa.ColumnElement[Any]) -> sa.ColumnElement[str]:
    # SQLite has no regular expressions: the Python rule, registered on this connection
    # before the statement that uses it runs.
    raw: Any = conn.connection.dbapi_connection
    raw.create_function(SQLITE_FUNCTION, 1, searchable_error, deterministic=True)
    function: sa.ColumnElement[str] = getattr(sa.func, SQLITE_FUNCTION)(column, type_=sa.Text)
    return function


def refuse_masked_value(name: str, value: str | None, *, mask_emails: bool) -> str | None:
    """`value` of an exact filter, or ValidationError when the reader sees such a value
    masked: a secret (everyone) or an email address (viewers)."""
    if value is None:
        return None
    if mask_text(value) != value:
        raise ValidationError(
            name,
            "cannot be a value the pages mask (a secret); follow the link on the job's "
            "page instead",
        )
    if mask_emails and mask_email(value) != value:
        raise ValidationError(
            name,
            "cannot contain an email address: viewers see it masked; follow the link on "
            "the job's page instead",
        )
    return value
