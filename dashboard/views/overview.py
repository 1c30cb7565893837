"""The overview: counts by status, queue and type, oldest queued age per queue, the
jobs held by paused queues, paused endpoints, open breakers and quarantines, the 24-hour
dead-letter trend, open alerts, workers and the leader. The panels refresh themselves
with htmx polling at the operator's remembered interval (`dashboard.refresh`; paused
while the tab is hidden, see static/dashboard.js)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from jobdesk.dashboard import auth, db
from jobdesk.dashboard.htmx import render
from jobdesk.dashboard.refresh import chosen_refresh
from jobdesk.dashboard.state import get_state
from jobdesk.dashboard.statuses import SHOWN_STATUSES
from jobdesk.shared.alerts import store as alert_store
from jobdesk.shared.core.leader import LEADER, current_lease
from jobdesk.shared.core.queues import paused_queues
from jobdesk.shared.core.states import CLAIMABLE
from jobdesk.shared.core.worker_registry import list_workers
from jobdesk.shared.operator.models import Role
from jobdesk.shared.operator.queries.dead_letters import dead_trend, unresolved_dead_count
from jobdesk.shared.operator.queries.holds import HoldKind, held_counts
from jobdesk.shared.operator.queries.stats import (
    CountRow,
    counts_by_status_queue_type,
    oldest_queued_age_by_queue,
)

bp = Blueprint("overview", __name__)

#: A due job waiting longer than this is shown as a warning.
STALE_QUEUE_SECONDS = 300
STATUS_ORDER = SHOWN_STATUSES
WAITING = frozenset(str(s) for s in CLAIMABLE)


def _job_aggregates() -> dict[str, Any]:
    """The job aggregates (on SQLite one index entry per job), cached per process for a
    few seconds."""
    with db.read() as conn:
        now = db.now(conn)
        return {
            "as_of": now,
            "rows": counts_by_status_queue_type(conn),
            "ages": oldest_queued_age_by_queue(conn, now),
            "trend": dead_trend(conn, now=now),
            "unresolved": unresolved_dead_count(conn),
        }


def overview_data() -> dict[str, Any]:
    state = get_state()
    aggregates = state.overview_cache.get(_job_aggregates)
    with db.read() as conn:
        now = db.now(conn)
        open_alerts = alert_store.list_alerts(conn, status="open", limit=5)
        open_alert_count = alert_store.count_open_alerts(conn)
        fleet = list_workers(conn, now=now, stale_after=state.worker_stale_after)
        lease = current_lease(conn, LEADER)
        paused = paused_queues(conn)
        # From the cached counts, so a queue pause costs no query; the jobs behind a
        # paused endpoint, an open breaker or a quarantine are one bounded index probe
        # each, and only while one exists (`shared.operator.queries.holds.held_counts`).
        # Not cached itself: a pause just made shows on the next refresh.
        waiting = _waiting_by_queue_type(aggregates["rows"])
        held = held_counts(conn, now=now, waiting=waiting)
    trend = aggregates["trend"]
    quarantines = [h for h in held if h.kind is HoldKind.QUARANTINE]
    totals = dict.fromkeys(STATUS_ORDER, 0)
    matrix: dict[tuple[str, str], dict[str, int]] = {}
    for row in aggregates["rows"]:
        totals[row.status] = totals.get(row.status, 0) + row.count
        matrix.setdefault((row.queue, row.job_type), {})[row.status] = row.count
    return {
        "now": now,
        "as_of": aggregates["as_of"],
        "totals": totals,
        "matrix": sorted(matrix.items()),
        "statuses": STATUS_ORDER,
        "ages": sorted(aggregates["ages"].items(), key=lambda kv: -kv[1]),
        "stale_queue_seconds": STALE_QUEUE_SECONDS,
        "trend": trend,
        "trend_total": sum(bucket.count for bucket in trend),
        "unresolved_dead": aggregates["unresolved"],
        "open_alerts": open_alerts,
        "open_alert_count": open_alert_count,
        "workers_alive": sum(1 for w in fleet if w.alive),
        "workers_total": len(fleet),
        "leader": lease if lease is not None and lease.valid(now) else None,
        "paused": paused,
        "held": held,
        "held_total": sum(h.count for h in held),
        "held_capped": any(h.capped for h in held),
        # Queued and failed jobs a pause or breaker holds: part of `waiting_total`. A
        # quarantined job is `waiting` instead, counted on its own.
        "held_due": sum(h.count for h in held if h.kind is not HoldKind.QUARANTINE),
        "held_due_capped": any(h.capped for h in held if h.kind is not HoldKind.QUARANTINE),
        "quarantined": sum(h.count for h in quarantines),
        "quarantined_capped": any(h.capped for h in quarantines),
        "waiting_total": sum(waiting.values()),
    }


def _waiting_by_queue_type(rows: list[CountRow]) -> dict[tuple[str, str], int]:
    """Queued + failed jobs by (queue, job type): the jobs a hold can stop."""
    found: dict[tuple[str, str], int] = {}
    for row in rows:
        if row.status in WAITING:
            key = (row.queue, row.job_type)
            found[key] = found.get(key, 0) + row.count
    return found


@bp.get("/")
@auth.requires(Role.VIEWER)
def index() -> Any:
    return render(
        "overview/index.html",
        "overview/_panels.html",
        "overview-panels",
        refresh=chosen_refresh(),
        **overview_data(),
    )
