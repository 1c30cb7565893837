"""The effects ledger: side effects recorded under stable keys so they happen once.

Pattern for an external side effect (email, webhook):

1. `find_effect(key)` — already done? Then skip and reuse the stored detail.
2. Do the effect, carrying an id derived from the key (`Message-ID`, `webhook-id`) so the
   receiver can recognise a repeat.
3. `record_effect(key, …)` and commit at once.

A crash between 2 and 3 repeats the effect with the *same* id, which the receiver
deduplicates; nothing else can repeat it. For an effect inside this database, record it
in the same transaction as the effect itself and it is exactly once.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.dialects import sqlite

from jobdesk.shared.core.db import is_postgresql
from jobdesk.shared.core.models import effects

MAX_KEY_LENGTH = 300


def check_effect_key(key: str) -> str:
    if not key or len(key) > MAX_KEY_LENGTH:
        raise ValueError(f"effect key must be 1-{MAX_KEY_LENGTH} characters")
    return key


def find_effect(conn: sa.Connection, key: str) -> dict[str, Any] | None:
    """The recorded detail of a done effect (an empty dict if none was stored), or None."""
    row = conn.execute(
        sa.select(effects.c.detail).where(effects.c.key == check_effect_key(key))
    ).first()
    if row is None:
        return None
    return dict(row.detail or {})


def record_effect(
    conn: sa.Connection, key: str, *, job_id: int | None, detail: dict[str, Any] | None = None
) -> bool:
    """Record an effect as done; False when the key was already recorded (by anyone)."""
    insert = pg.insert if is_postgresql(conn) else sqlite.insert
    statement = (
        insert(effects)
        .values(key=check_effect_key(key), job_id=job_id, detail=detail or {})
        .on_conflict_do_nothing(index_elements=[effects.c.key])
        .returning(effects.c.id)
    )
    return conn.execute(statement).first() is not None
