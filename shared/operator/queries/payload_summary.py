"""The short payload summary a jobs list shows per row: `user_id=42 · endpoint=crm`.

Lists never select the payload itself (up to 256 KiB a job). `payload_summary(payload)`
is a SQL expression that picks the first `PAIRS` scalar top-level members in the
database and returns them as a small JSON text `[[key, text, type], …]`; a string
longer than `MAX_TEXT_CHARS` comes back without its text (the list shows `…`), so every
text that is shown is the whole value and is masked exactly as the job's page masks it
(a secret cut in half might no longer look like one). Keys come back whole up to
`MAX_KEY_CHECK_CHARS`, so whether a key is secret is decided on the whole key, and only
then is it cut to `MAX_KEY_CHARS` for display; a value under a longer key is masked.
"First" is the stored order: insertion order on SQLite, JSONB's own key order (shorter
keys first) on PostgreSQL.
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

from jobdesk.shared.core.masking import (
    MASK,
    is_card_number,
    is_secret_key,
    mask_email,
    mask_text,
)

PAIRS = 3
#: What a row shows of a key at most.
MAX_KEY_CHARS = 40
#: The longest key whose secret-ness is checked; the value of a longer one is masked.
MAX_KEY_CHECK_CHARS = 1000
MAX_TEXT_CHARS = 200
#: What a row shows of one value at most.
SHOWN_CHARS = 40


class payload_summary(FunctionElement[str]):
    """`[[key, text or null, json type], …]` as text; see the module."""

    type = sa.Text()
    inherit_cache = True


@compiles(payload_summary, "postgresql")
def _summary_postgresql(element: payload_summary, compiler: Any, **kw: Any) -> str:
    payload = compiler.process(element.clauses, **kw)
    return (
        "(SELECT CAST(coalesce(json_agg(json_build_array("
        f"left(e.key, {MAX_KEY_CHECK_CHARS + 1}), "
        f"CASE WHEN length(e.value #>> '{{}}') <= {MAX_TEXT_CHARS} THEN e.value #>> '{{}}' END, "
        "jsonb_typeof(e.value))), '[]') AS TEXT) "
        f"FROM (SELECT key, value FROM jsonb_each(CASE WHEN jsonb_typeof({payload}) = 'object' "
        f"THEN {payload} END) WHERE jsonb_typeof(value) NOT IN ('object', 'array') "
        f"LIMIT {PAIRS}) AS e)"
    )


@compiles(payload_summary, "sqlite")
def _summary_sqlite(element: payload_summary, compiler: Any, **kw: Any) -> str:
    payload = compiler.process(element.clauses, **kw)
    # A plain-SQL insert may have stored text that is not JSON: no summary, no error.
    document = (
        f"CASE WHEN json_valid({payload}) THEN "
        f"CASE WHEN json_type({payload}) = 'object' THEN {payload} END END"
    )
    return (
        f"(SELECT json_group_array(json_array(substr(e.key, 1, {MAX_KEY_CHECK_CHARS + 1}), "
        f"CASE WHEN e.type <> 'text' OR length(e.atom) <= {MAX_TEXT_CHARS} THEN e.atom END, "
        "e.type)) "
        f"FROM (SELECT key, atom, type FROM json_each({document}) "
        f"WHERE type NOT IN ('object', 'array') LIMIT {PAIRS}) AS e)"
    )


_NUMBER_TYPES = {"number", "integer", "real"}


def _shown(key: str, text: Any, kind: str, *, mask_emails: bool) -> str:
    if kind in ("true", "false", "null", "boolean"):
        if kind == "boolean":
            return str(text).lower()
        return kind
    if len(key) > MAX_KEY_CHECK_CHARS or is_secret_key(key):
        return MASK
    if text is None:
        return "…"
    value = str(text)
    if kind in _NUMBER_TYPES:
        if value.isdigit() and is_card_number(value):
            return MASK
    else:
        value = mask_text(value)
        if mask_emails:
            value = mask_email(value)
    return _cut(value, SHOWN_CHARS)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def summary_pairs(raw: str | None, *, mask_emails: bool) -> list[tuple[str, str]]:
    """The (key, shown value) pairs of a `payload_summary` text, masked for the reader."""
    if not raw:
        return []
    try:
        items = json.loads(raw)
    except ValueError:
        return []
    pairs: list[tuple[str, str]] = []
    for item in items if isinstance(items, list) else []:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)):
            continue
        key, text, kind = item
        shown_key = _cut(mask_text(key), MAX_KEY_CHARS)
        pairs.append((shown_key, _shown(key, text, str(kind), mask_emails=mask_emails)))
    return pairs
