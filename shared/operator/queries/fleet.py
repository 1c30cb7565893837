"""Read side of the running system for operators: the job types some worker can run,
and recent webhook delivery health per endpoint.

The worker writes these tables (`core.worker_registry`, `webhooks.deliveries`); this
module only reads them. Workers themselves are listed with
`core.worker_registry.list_workers`, the leader lease with `core.leader.current_lease`,
alerts with `alerts.store.list_alerts`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from jobdesk.shared.webhooks.models import webhook_deliveries


@dataclass(frozen=True, slots=True)
class DeliveryHealth:
    endpoint: str
    attempts: int
    failures: int
    last_at: datetime | None
    last_status_code: int | None

    @property
    def failure_rate(self) -> float:
        return self.failures / self.attempts if self.attempts else 0.0


def delivery_health(
    conn: sa.Connection, endpoints: Iterable[str], *, since: datetime
) -> dict[str, DeliveryHealth]:
    """Delivery attempts and failures (anything but a 2xx answer) per endpoint since `since`."""
    names = list(endpoints)
    if not names:
        return {}
    ok = webhook_deliveries.c.status_code.between(200, 299)
    query = (
        sa.select(
            webhook_deliveries.c.endpoint,
            sa.func.count().label("n"),
            sa.func.sum(sa.case((ok, 0), else_=1)).label("failed"),
            sa.func.max(webhook_deliveries.c.at).label("last_at"),
        )
        .where(webhook_deliveries.c.endpoint.in_(names), webhook_deliveries.c.at >= since)
        .group_by(webhook_deliveries.c.endpoint)
    )
    return {
        row.endpoint: DeliveryHealth(row.endpoint, row.n, int(row.failed or 0), row.last_at, None)
        for row in conn.execute(query)
    }
