"""The connection budget: how many PostgreSQL connections a worker process may open, and
whether the fleet fits in what the server allows.

Per process: the runtime's pool (claim, completer, heartbeat, maintenance) with its
overflow, the handlers' pool with its overflow, and one LISTEN connection. For the
fleet: that times `JOBDESK_FLEET_PROCESSES` (hosts times processes per host), against
`max_connections` minus the slots PostgreSQL keeps for superusers. Behind PgBouncer only
the direct LISTEN connection counts (PgBouncer's pool stands for the rest). A worker refuses to
start when the configured fleet cannot fit, and warns when this process alone would
push the server past its limit given what is connected already.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobdesk.shared.core.capacity import ServerCapacity
from jobdesk.shared.settings import Settings

__all__ = ["Budget", "budget_for", "check_budget"]


def _with_overflow(pool_size: int) -> int:
    # make_engine's PostgreSQL pools allow max(2, pool_size // 2) connections of overflow.
    return pool_size + max(2, pool_size // 2)


@dataclass(frozen=True, slots=True)
class Budget:
    runtime: int
    handlers: int
    listener: int

    @property
    def per_process(self) -> int:
        return self.runtime + self.handlers + self.listener

    def describe(self) -> str:
        return (
            f"{self.per_process} per process ({self.runtime} runtime + {self.handlers} "
            f"handlers + {self.listener} listener)"
        )


def budget_for(total_slots: int, settings: Settings, runtime_pool: int) -> Budget:
    if settings.pgbouncer:
        # Both pools connect to PgBouncer, whose own pool (default_pool_size per database
        # and user) is what the server sees; only the LISTEN connection goes direct.
        return Budget(0, 0, 1 if settings.listen_url else 0)
    handler_pool = min(total_slots, settings.db_pool_size)
    return Budget(_with_overflow(runtime_pool), _with_overflow(handler_pool), 1)


def check_budget(budget: Budget, settings: Settings, server: ServerCapacity) -> str | None:
    """A warning to log (or None); raises BudgetError when the configured fleet cannot fit."""
    allowed = server.allowed
    fleet = settings.fleet_processes
    if fleet is not None and fleet * budget.per_process > allowed:
        raise BudgetError(
            f"{fleet} worker processes (JOBDESK_FLEET_PROCESSES) may open up to "
            f"{fleet * budget.per_process} connections — {budget.describe()} — but the "
            f"server allows {allowed} (max_connections {server.max_connections} minus "
            f"{server.reserved} for superusers): lower --concurrency or JOBDESK_DB_POOL_SIZE, "
            "raise max_connections, or put PgBouncer in front"
        )
    if server.in_use + budget.per_process > allowed:
        return (
            f"this worker may open up to {budget.per_process} connections "
            f"({budget.describe()}); {server.in_use} of the server's {allowed} are in use "
            "already, so connections may be refused"
        )
    return None


class BudgetError(RuntimeError):
    """The configured fleet needs more connections than the server allows."""
