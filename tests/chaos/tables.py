"""Tables and constants of the chaos run, importable without side effects.

The job module (`tests.chaos.jobmods`) changes the built-in types' retry delays when it
is imported, which only the chaos workers may do; the driver, the checker and the tests
read these definitions from here instead.
"""

from __future__ import annotations

import sqlalchemy as sa

MAX_ATTEMPTS = 25
#: At most this many `chaos.keyed_effect` jobs of one concurrency key run at once (the
#: checker reads it back from the attempts).
KEY_LIMIT = 2
QUEUE = "chaos"
#: How a `chaos.abort` handler ends its attempts.
ABORTS = ("system_exit", "keyboard_interrupt", "unprintable")

metadata = sa.MetaData()
chaos_effects = sa.Table(
    "chaos_effects",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("key", sa.String(200), nullable=False, index=True),
    sa.Column("job_id", sa.BigInteger, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("worker", sa.String(200), nullable=False),
)
chaos_once = sa.Table(
    "chaos_once",
    metadata,
    sa.Column("key", sa.String(200), primary_key=True),
    sa.Column("deliveries", sa.Integer, nullable=False),
)
