"""Bench databases without autovacuum, so that no drain shares the machine with one.

Every drain starts from `VACUUM ANALYZE` and a `CHECKPOINT` of its own database, so the
bench needs no autovacuum; left on, the launcher visits each database about once a
minute and found the tables the previous drain had churned (the other system's, in
another database) while the next drain ran: one round in five or six came out at half
speed, for whichever system was draining at the time.
"""

from __future__ import annotations

import psycopg

_TABLES = """
SELECT format('%I.%I', n.nspname, c.relname)
  FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
 WHERE c.relkind = 'r' AND n.nspname NOT IN ('pg_catalog', 'information_schema')
   AND n.nspname NOT LIKE 'pg_toast%'
"""


def autovacuum_off(dsn: str) -> None:
    """Turn autovacuum off for every table of the database at `dsn` (plain libpq DSN)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for (table,) in conn.execute(_TABLES).fetchall():
            conn.execute(
                f"ALTER TABLE {table} SET (autovacuum_enabled = false,"
                " toast.autovacuum_enabled = false)"
            )
