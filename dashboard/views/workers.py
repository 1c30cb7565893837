"""Workers: heartbeats, queues and types they run, the maintenance leader, and clock
skew as each worker measured it against the database."""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from jobdesk.dashboard import auth, db
from jobdesk.dashboard.htmx import render
from jobdesk.dashboard.refresh import chosen_refresh
from jobdesk.dashboard.state import get_state
from jobdesk.shared.core.leader import LEADER, current_lease
from jobdesk.shared.core.worker_registry import list_workers
from jobdesk.shared.operator.models import Role

bp = Blueprint("workers", __name__)
#: Skew beyond this is flagged (leases and backoff use the database clock, but logs and
#: local timeouts do not).
SKEW_WARNING_SECONDS = 5.0


@bp.get("/workers")
@auth.requires(Role.VIEWER)
def index() -> Any:
    state = get_state()
    with db.read() as conn:
        now = db.now(conn)
        rows = list_workers(conn, now=now, stale_after=state.worker_stale_after)
        lease = current_lease(conn, LEADER)
    return render(
        "workers/index.html",
        "workers/_table.html",
        "worker-table",
        workers=rows,
        leader=lease,
        leader_valid=lease is not None and lease.valid(now),
        now=now,
        refresh=chosen_refresh(),
        stale_after=state.worker_stale_after.total_seconds(),
        skew_warning=SKEW_WARNING_SECONDS,
    )
