"""What makes "find the jobs whose payload has `user_id=42`" an index lookup on SQLite.

PostgreSQL needs nothing here: the payload is JSONB and a GIN index
(`ix_jobdesk_jobs_payload`, `jsonb_path_ops`) serves containment (`payload @> …`) for
any key. SQLite has no index over arbitrary JSON keys, so `jobdesk_payload_terms` holds
one row per scalar of a job's payload — (path, value, job_id) — and its primary key is
the index a search probes. Triggers on `jobdesk_jobs` keep it, so a job enqueued by
plain SQL from another language is found like one enqueued through the Python API, and
pruning a job takes its terms with it. On PostgreSQL the table exists (one schema for
both databases) and stays empty.

What is indexed, on purpose no more (the enqueue path pays for every row):

- top-level keys and keys one object below them (`customer.id`), the path written with a
  dot; keys that themselves hold a dot are left out (the dot means nesting);
- scalars only: strings of at most `MAX_VALUE_CHARS` characters (a search value is no
  longer), numbers, true, false, null — array elements are not terms;
- the value typed by its first letter: `s` + the text, `n` + the number (an integral
  real as the integer, so 42 and 42.0 are one term, as they are one number in JSONB),
  or the literal's name (`true`, `false`, `null`).

Cost, measured with the triggers (and, on PostgreSQL, the GIN index) present and
dropped in alternating rounds of raw inserts of a payload with four indexed scalars, on
a loaded two-core machine: SQLite bulk inserts about half as fast (~11k -> ~6k rows/s),
a single insert +0.03 ms; PostgreSQL bulk inserts ~12 % slower, a single insert within
the noise.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.models import Base, BigId, install_after_create, table_of

#: The longest key path and string value a term holds (and a search may ask for).
MAX_PATH_CHARS = 200
MAX_VALUE_CHARS = 200


class PayloadTerm(Base):
    """One scalar of one job's payload: `path` = `value` (SQLite only; see the module)."""

    __tablename__ = "jobdesk_payload_terms"

    path: Mapped[str] = mapped_column(sa.String(MAX_PATH_CHARS), primary_key=True)
    value: Mapped[str] = mapped_column(sa.String(MAX_VALUE_CHARS + 1), primary_key=True)
    job_id: Mapped[int] = mapped_column(BigId, primary_key=True)

    __table_args__ = (
        # The delete and update triggers find a job's terms by it.
        sa.Index("ix_jobdesk_payload_terms_job_id", "job_id"),
        # The key is the whole row: no separate rowid tree to write on every enqueue.
        {"sqlite_with_rowid": False},
    )


payload_terms = table_of(PayloadTerm)


#: Integers the terms hold as integers (SQLite's 64-bit range).
_BIGINT = 2**63


def term_value(value: str | float | bool | None) -> sa.ColumnElement[str]:
    """A JSON scalar spelled as the triggers store it in `value` (see the module), for a
    search to probe with."""
    if isinstance(value, bool):
        return sa.literal("true" if value else "false")
    if value is None:
        return sa.literal("null")
    if isinstance(value, str):
        return sa.literal("s" + value)
    if isinstance(value, int) or (value.is_integer() and -_BIGINT <= value < _BIGINT):
        return sa.literal(f"n{int(value)}")
    # Other reals as SQLite itself prints them (its CAST, as in the trigger).
    return sa.literal("n") + sa.cast(sa.literal(value, sa.Float()), sa.Text)


def number_text(sql: str) -> str:
    """SQL for the canonical text of the number `sql`: an integral real as the integer
    (42.0 -> `42`), other reals as SQLite prints them. Used by the triggers and, with a
    bound parameter, by the search, so both spell a number the same way."""
    return (
        f"CASE WHEN typeof({sql}) = 'real' AND {sql} = CAST({sql} AS INTEGER) "
        f"THEN CAST(CAST({sql} AS INTEGER) AS TEXT) ELSE CAST({sql} AS TEXT) END"
    )


def _term_value(alias: str) -> str:
    return (
        f"CASE {alias}.type WHEN 'text' THEN 's' || {alias}.atom "
        f"WHEN 'integer' THEN 'n' || {number_text(f'{alias}.atom')} "
        f"WHEN 'real' THEN 'n' || {number_text(f'{alias}.atom')} "
        f"ELSE {alias}.type END"
    )


def _indexable(alias: str) -> str:
    return (
        f"{alias}.type NOT IN ('object', 'array') AND instr({alias}.key, '.') = 0 "
        f"AND ({alias}.type <> 'text' OR length({alias}.atom) <= {MAX_VALUE_CHARS})"
    )


# The payload when it is a JSON object, else NULL (no terms): a plain-SQL insert may
# store anything, and json_each would fail the insert on text that is not JSON.
_OBJECT = (
    "CASE WHEN json_valid(NEW.payload) THEN "
    "CASE WHEN json_type(NEW.payload) = 'object' THEN NEW.payload END END"
)

_INSERT_TERMS = (
    "INSERT OR IGNORE INTO jobdesk_payload_terms (path, value, job_id) "
    f"SELECT top.key, {_term_value('top')}, NEW.id FROM json_each({_OBJECT}) AS top "
    f"WHERE {_indexable('top')} AND length(top.key) <= {MAX_PATH_CHARS} "
    "UNION ALL "
    f"SELECT outer_.key || '.' || inner_.key, {_term_value('inner_')}, NEW.id "
    f"FROM json_each({_OBJECT}) AS outer_, json_each(outer_.value) AS inner_ "
    f"WHERE outer_.type = 'object' AND instr(outer_.key, '.') = 0 AND {_indexable('inner_')} "
    f"AND length(outer_.key) + 1 + length(inner_.key) <= {MAX_PATH_CHARS};"
)

#: The SQLite triggers, in order (the migration and `create_all` run them).
SQLITE_DDL: tuple[str, ...] = (
    "CREATE TRIGGER jobdesk_payload_terms_inserted AFTER INSERT ON jobdesk_jobs "
    f"BEGIN {_INSERT_TERMS} END",
    "CREATE TRIGGER jobdesk_payload_terms_deleted AFTER DELETE ON jobdesk_jobs BEGIN "
    "DELETE FROM jobdesk_payload_terms WHERE job_id = OLD.id; END",
    # Only a statement that sets the payload (editing a job, masking a secret) fires it;
    # claims and completions do not name the column.
    "CREATE TRIGGER jobdesk_payload_terms_updated AFTER UPDATE OF payload ON jobdesk_jobs "
    "BEGIN DELETE FROM jobdesk_payload_terms WHERE job_id = OLD.id; "
    f"{_INSERT_TERMS} END",
)

TRIGGER_NAMES = ("inserted", "deleted", "updated")


# `metadata.create_all` gets the triggers too; the migration runs SQLITE_DDL itself.
install_after_create(
    frozenset({"jobdesk_jobs", "jobdesk_payload_terms"}),
    lambda connection: driver(connection).choose(postgresql=(), sqlite=SQLITE_DDL),
)
