"""What the PostgreSQL server allows: its connection limit and current use."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa


@dataclass(frozen=True, slots=True)
class ServerCapacity:
    max_connections: int
    reserved: int
    in_use: int

    @property
    def allowed(self) -> int:
        """Connections ordinary roles may open."""
        return self.max_connections - self.reserved


def server_capacity(conn: sa.Connection) -> ServerCapacity:
    row = conn.execute(
        sa.text(
            "SELECT current_setting('max_connections')::int, "
            "current_setting('superuser_reserved_connections')::int, "
            "(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')"
        )
    ).one()
    return ServerCapacity(int(row[0]), int(row[1]), int(row[2]))
