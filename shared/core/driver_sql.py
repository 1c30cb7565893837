"""Writes held to be made later in someone else's transaction (a handler's
`ctx.with_outcome`), batched by writer.

`BatchedWrite` is one row's parameters for a writer that takes many rows at once:
`run_writes` hands the rows of one writer over together, so a completer batch costs one
statement per writer, not one per row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

RunMany = Callable[[sa.Connection, list[dict[str, Any]]], None]


@dataclass(frozen=True, slots=True)
class BatchedWrite:
    """One row's parameters for `run_many`, which writes any number of such rows in one
    go; to be run later, alone or with the other rows of the same `run_many`."""

    run_many: RunMany
    params: dict[str, Any]

    def __call__(self, conn: sa.Connection) -> None:
        self.run_many(conn, [self.params])


def run_writes(conn: sa.Connection, writes: Iterable[Callable[[sa.Connection], None]]) -> None:
    """Make every write in `conn`'s transaction; the `BatchedWrite`s of one `run_many` go
    together as one call. Writes must not depend on each other's order."""
    batched: dict[RunMany, list[dict[str, Any]]] = {}
    for write in writes:
        if isinstance(write, BatchedWrite):
            batched.setdefault(write.run_many, []).append(write.params)
        else:
            write(conn)
    for run_many, rows in batched.items():
        run_many(conn, rows)
