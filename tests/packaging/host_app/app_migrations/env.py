"""The host app's own Alembic history (default `alembic_version` table)."""

import os

import sqlalchemy as sa
from alembic import context

engine = sa.create_engine(os.environ["APP_DATABASE_URL"])
with engine.connect() as connection:
    context.configure(connection=connection, target_metadata=None)
    with context.begin_transaction():
        context.run_migrations()
