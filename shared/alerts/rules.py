"""The alert rules: each turns the database at a fixed `now` into `Finding`s, one per
subject (a job type, a queue, an error fingerprint, a breaker, an endpoint, a schedule).

The rules only read; `alerts.store.apply_findings` reconciles their findings with the
`jobdesk_alerts` table and sends the notifications.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.alerts.models import AlertStatus, alerts
from jobdesk.shared.core.masking import mask_prefix
from jobdesk.shared.core.models import job_attempts, jobs
from jobdesk.shared.core.states import AttemptOutcome, JobStatus
from jobdesk.shared.limits.models import BreakerState, circuit_breakers
from jobdesk.shared.operator.queries.metrics import due_backlog, live_after, live_workers
from jobdesk.shared.schedules.models import schedules
from jobdesk.shared.settings import alerts as rules
from jobdesk.shared.webhooks.models import webhook_endpoints

WEBHOOK_JOB = "webhook.deliver"
EXCERPT_CHARS = 300


@dataclass(frozen=True)
class Finding:
    """A rule firing for one subject at `now`."""

    rule: str
    subject: str
    message: str
    count: int
    details: dict[str, Any] = field(default_factory=dict)


def minutes(value: float) -> timedelta:
    return timedelta(minutes=value)


def _endpoint_expr() -> sa.ColumnElement[Any]:
    return sa.case(
        (jobs.c.job_type == WEBHOOK_JOB, jobs.c.payload["endpoint"].as_string()),
        else_=sa.null(),
    )


def type_subject(job_type: str, endpoint: str | None) -> str:
    return f"{job_type}:{endpoint}" if endpoint else job_type


def find_dead_letter_spikes(
    conn: sa.Connection,
    now: datetime,
    cfg: rules.DeadLetterSpike,
    open_alerts: dict[str, sa.Row[Any]] | None = None,
) -> list[Finding]:
    """Job types (webhooks: per endpoint) with a burst of unresolved dead letters.

    Fires when the window holds at least `min_count` unresolved dead letters and at least
    `factor` x the trailing baseline's rate. An open alert then holds while at least
    `min_count` of the dead letters since its window are still unresolved — it resolves
    when support requeues or ignores them, not merely because the window moved on.
    """
    window = minutes(cfg.window_minutes)
    start = now - window
    base_start = start - minutes(cfg.baseline_minutes)
    endpoint = _endpoint_expr().label("endpoint")
    recent = sa.func.sum(
        sa.case((sa.and_(jobs.c.finished_at > start, jobs.c.resolution.is_(None)), 1), else_=0)
    )
    baseline = sa.func.sum(sa.case((jobs.c.finished_at <= start, 1), else_=0))
    query = (
        sa.select(jobs.c.job_type, endpoint, recent.label("recent"), baseline.label("baseline"))
        .where(
            jobs.c.status == JobStatus.DEAD.value,
            jobs.c.finished_at > base_start,
            jobs.c.finished_at <= now,
        )
        .group_by(jobs.c.job_type, endpoint)
    )
    scale = cfg.window_minutes / cfg.baseline_minutes
    found: dict[str, Finding] = {}
    for row in conn.execute(query):
        count = int(row.recent or 0)
        expected = float(row.baseline or 0) * scale
        if count < cfg.min_count or count < cfg.factor * expected:
            continue
        subject = type_subject(row.job_type, row.endpoint)
        error = _top_error(conn, row.job_type, row.endpoint, start, now)
        found[subject] = _spike_finding(
            subject, row.job_type, row.endpoint, count, cfg, expected=expected, since=start,
            error=error,
        )  # fmt: skip
    for subject, alert in (open_alerts or {}).items():
        if subject in found:
            continue
        details = alert.details or {}
        job_type = details.get("job_type")
        if not isinstance(job_type, str):
            continue
        since = alert.opened_at - window
        held = _unresolved_dead(conn, job_type, details.get("endpoint"), since, now)
        if held >= cfg.min_count:
            error = _top_error(conn, job_type, details.get("endpoint"), since, now)
            found[subject] = _spike_finding(
                subject, job_type, details.get("endpoint"), held, cfg, expected=None, since=since,
                error=error,
            )  # fmt: skip
    return list(found.values())


def _unresolved_dead(
    conn: sa.Connection, job_type: str, endpoint: Any, since: datetime, now: datetime
) -> int:
    query = (
        sa.select(sa.func.count())
        .select_from(jobs)
        .where(
            jobs.c.status == JobStatus.DEAD.value,
            jobs.c.job_type == job_type,
            jobs.c.resolution.is_(None),
            jobs.c.finished_at > since,
            jobs.c.finished_at <= now,
        )
    )
    if isinstance(endpoint, str):
        query = query.where(_endpoint_expr() == endpoint)
    return int(conn.execute(query).scalar_one())


def _top_error(
    conn: sa.Connection, job_type: str, endpoint: Any, since: datetime, now: datetime
) -> str:
    """The commonest error among the unresolved dead letters of a spike (first line)."""
    query = (
        sa.select(jobs.c.error_fingerprint, sa.func.max(jobs.c.last_error).label("error"))
        .where(
            jobs.c.status == JobStatus.DEAD.value,
            jobs.c.job_type == job_type,
            jobs.c.resolution.is_(None),
            jobs.c.finished_at > since,
            jobs.c.finished_at <= now,
        )
        .group_by(jobs.c.error_fingerprint)
        .order_by(sa.func.count().desc())
        .limit(1)
    )
    if isinstance(endpoint, str):
        query = query.where(_endpoint_expr() == endpoint)
    row = conn.execute(query).first()
    return _first_line(row.error or "") if row is not None else ""


def _spike_finding(
    subject: str,
    job_type: str,
    endpoint: str | None,
    count: int,
    cfg: rules.DeadLetterSpike,
    *,
    expected: float | None,
    since: datetime,
    error: str = "",
) -> Finding:
    target = f"{job_type} jobs to {endpoint}" if endpoint else f"{job_type} jobs"
    if expected is None:
        message = f"{count} {target} died since {since:%H:%M} UTC and are still unresolved"
    else:
        message = f"{count} {target} died in the last {cfg.window_minutes:g} min"
    if error:
        message += f": {error}"
    job_filter: dict[str, Any] = {"status": JobStatus.DEAD.value, "job_type": job_type}
    if endpoint:
        job_filter["endpoint"] = endpoint
    details: dict[str, Any] = {
        "job_type": job_type,
        "endpoint": endpoint,
        "job_types": [job_type],
        "endpoints": [endpoint] if endpoint else [],
        "since": since.isoformat(),
        "filter": job_filter,
        "error": error,
    }
    if expected is not None:
        details["baseline_per_window"] = round(expected, 3)
    return Finding(rules.DEAD_LETTER_SPIKE, subject, message, count, details)


def find_repeated_errors(
    conn: sa.Connection, now: datetime, cfg: rules.RepeatedError
) -> list[Finding]:
    """Error fingerprints seen on at least `min_jobs` distinct jobs within the window.

    Attempts catch failures that are still retrying; the jobs' own fingerprint covers
    rows written without attempt history (plain-SQL imports, tests).
    """
    start = now - minutes(cfg.window_minutes)
    from_attempts = sa.select(
        job_attempts.c.job_id.label("job_id"), job_attempts.c.error_fingerprint.label("fp")
    ).where(
        job_attempts.c.error_fingerprint.is_not(None),
        job_attempts.c.outcome != AttemptOutcome.SUCCEEDED.value,
        job_attempts.c.finished_at > start,
        job_attempts.c.finished_at <= now,
    )
    from_jobs = sa.select(jobs.c.id.label("job_id"), jobs.c.error_fingerprint.label("fp")).where(
        jobs.c.error_fingerprint.is_not(None),
        jobs.c.status.in_([JobStatus.FAILED.value, JobStatus.DEAD.value]),
        jobs.c.updated_at > start,
        jobs.c.updated_at <= now,
    )
    pairs = sa.union(from_attempts, from_jobs).subquery("pairs")
    counts = (
        sa.select(pairs.c.fp, sa.func.count().label("n"))
        .group_by(pairs.c.fp)
        .having(sa.func.count() >= cfg.min_jobs)
        .order_by(pairs.c.fp)
    )
    firing = {fp: int(n) for fp, n in conn.execute(counts)}
    if not firing:
        return []
    endpoint = _endpoint_expr().label("endpoint")
    spread = (
        sa.select(pairs.c.fp, jobs.c.job_type, endpoint, sa.func.count().label("n"))
        .join(jobs, jobs.c.id == pairs.c.job_id)
        .where(pairs.c.fp.in_(list(firing)))
        .group_by(pairs.c.fp, jobs.c.job_type, endpoint)
    )
    types: dict[str, dict[str, int]] = {}
    endpoints: dict[str, set[str]] = {}
    for row in conn.execute(spread):
        types.setdefault(row.fp, {})[row.job_type] = int(row.n)
        if row.endpoint:
            endpoints.setdefault(row.fp, set()).add(row.endpoint)
    findings = []
    for fp, count in firing.items():
        sample = _sample_error(conn, fp)
        by_type = types.get(fp, {})
        targets = ", ".join(sorted(by_type)) or "unknown types"
        where = sorted(endpoints.get(fp, set()))
        if where:
            targets += f" to {', '.join(where)}"
        message = (
            f"{count} jobs ({targets}) failed with the same error in the last "
            f"{cfg.window_minutes:g} min: {_first_line(sample)}"
        )
        details = {
            "fingerprint": fp,
            "job_types": sorted(by_type),
            "jobs_by_type": by_type,
            "endpoints": where,
            "error": sample,
            "filter": {"fingerprint": fp},
        }
        findings.append(Finding(rules.REPEATED_ERROR, fp, message, count, details))
    return findings


def _sample_error(conn: sa.Connection, fp: str) -> str:
    query = (
        sa.select(jobs.c.last_error)
        .where(jobs.c.error_fingerprint == fp, jobs.c.last_error.is_not(None))
        .order_by(jobs.c.id.desc())
        .limit(1)
    )
    value = conn.execute(query).scalar()
    if value is None:
        query = (
            sa.select(job_attempts.c.error)
            .where(job_attempts.c.error_fingerprint == fp, job_attempts.c.error.is_not(None))
            .order_by(job_attempts.c.id.desc())
            .limit(1)
        )
        value = conn.execute(query).scalar()
    return _stored_error(value)


def _stored_error(text: object) -> str:
    """A stored error as an alert carries it: masked again, for rows the current rules
    did not mask when they were written (older versions, plain SQL), and bounded."""
    return mask_prefix(str(text or ""), EXCERPT_CHARS)[0]


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "(no message)"
    return mask_prefix(line, 200)[0]


def find_stalled_queues(
    conn: sa.Connection, now: datetime, cfg: rules.QueueStalled
) -> list[Finding]:
    """Queues whose oldest due job has waited longer than `max_age_seconds`."""
    findings = []
    for row in due_backlog(conn, now):
        if row.oldest_age_seconds <= cfg.max_age_seconds:
            continue
        message = (
            f"queue {row.queue}: oldest due job waiting {_duration(row.oldest_age_seconds)} "
            f"({row.due} due)"
        )
        details = {
            "queue": row.queue,
            "due": row.due,
            "oldest_age_seconds": round(row.oldest_age_seconds, 3),
            "job_types": [],
            "filter": {"queue": row.queue, "status": JobStatus.QUEUED.value},
        }
        findings.append(Finding(rules.QUEUE_STALLED, row.queue, message, row.due, details))
    return findings


def find_missing_consumers(
    conn: sa.Connection, now: datetime, cfg: rules.NoConsumer, heartbeat_seconds: float
) -> list[Finding]:
    """Due jobs that no live worker serves: subject `queue:<q>` when no live worker
    listens on the queue, `job_type:<t>` when workers listen but none knows the type."""
    due_before = now - timedelta(seconds=cfg.min_age_seconds)
    backlog = due_backlog(conn, now, by_type=True, due_before=due_before)
    if not backlog:
        return []
    live = live_workers(conn, live_after(now, heartbeat_seconds, cfg.live_heartbeats))
    by_queue: dict[str, list[Any]] = {}
    findings: list[Finding] = []
    for row in backlog:
        listeners = [w for w in live if w.queues is None or row.queue in w.queues]
        if not listeners:
            by_queue.setdefault(row.queue, []).append(row)
            continue
        if any(w.job_types is None or row.job_type in w.job_types for w in listeners):
            continue
        assert row.job_type is not None
        message = (
            f"job type {row.job_type} (queue {row.queue}): {row.due} due, no live worker "
            f"knows this type ({len(listeners)} serve the queue)"
        )
        details = {
            "job_type": row.job_type,
            "queue": row.queue,
            "due": row.due,
            "job_types": [row.job_type],
            "oldest_age_seconds": round(row.oldest_age_seconds, 3),
            "filter": {"job_type": row.job_type, "status": JobStatus.QUEUED.value},
        }
        subject = f"job_type:{row.job_type}"
        findings.append(Finding(rules.NO_CONSUMER, subject, message, row.due, details))
    for queue, rows in by_queue.items():
        due = sum(r.due for r in rows)
        oldest = max(r.oldest_age_seconds for r in rows)
        message = (
            f"queue {queue}: {due} due jobs and no live worker serves it "
            f"(oldest waiting {_duration(oldest)}; {len(live)} live workers)"
        )
        details = {
            "queue": queue,
            "due": due,
            "job_types": sorted({str(r.job_type) for r in rows}),
            "oldest_age_seconds": round(oldest, 3),
            "filter": {"queue": queue, "status": JobStatus.QUEUED.value},
        }
        findings.append(Finding(rules.NO_CONSUMER, f"queue:{queue}", message, due, details))
    return findings


def find_open_breakers(conn: sa.Connection, now: datetime, cfg: rules.BreakerOpen) -> list[Finding]:
    """Circuit breakers open or half-open for longer than `min_open_seconds`."""
    cutoff = now - timedelta(seconds=cfg.min_open_seconds)
    query = (
        sa.select(circuit_breakers)
        .where(
            circuit_breakers.c.state != BreakerState.CLOSED, circuit_breakers.c.opened_at <= cutoff
        )
        .order_by(circuit_breakers.c.key)
    )
    findings = []
    for row in conn.execute(query):
        age = (now - row.opened_at).total_seconds()
        error = _stored_error(row.last_error)
        message = (
            f"circuit breaker {row.key} {row.state.replace('_', '-')} for {_duration(age)} "
            f"({row.consecutive_failures} consecutive failures): {_first_line(error)}"
        )
        details = {
            "breaker": row.key,
            "state": row.state,
            "opened_at": row.opened_at.isoformat(),
            "consecutive_failures": row.consecutive_failures,
            "error": error,
            "job_types": [],
        }
        findings.append(
            Finding(rules.BREAKER_OPEN, row.key, message, row.consecutive_failures, details)
        )
    return findings


def find_paused_endpoints(
    conn: sa.Connection, now: datetime, cfg: rules.EndpointPaused
) -> list[Finding]:
    """Webhook endpoints paused (and not about to resume) for longer than the threshold."""
    cutoff = now - timedelta(seconds=cfg.min_paused_seconds)
    ep = webhook_endpoints
    query = (
        sa.select(ep.c.name, ep.c.updated_at, ep.c.paused_until, ep.c.paused_reason)
        .where(
            ep.c.paused.is_(sa.true()),
            ep.c.updated_at <= cutoff,
            sa.or_(ep.c.paused_until.is_(None), ep.c.paused_until > now),
        )
        .order_by(ep.c.name)
    )
    findings = []
    for row in conn.execute(query):
        age = (now - row.updated_at).total_seconds()
        message = f"webhook endpoint {row.name} paused for {_duration(age)}"
        if row.paused_reason:
            message += f": {_first_line(row.paused_reason)}"
        details = {
            "endpoint": row.name,
            "endpoints": [row.name],
            "paused_since": row.updated_at.isoformat(),
            "paused_until": row.paused_until.isoformat() if row.paused_until else None,
            "job_types": [WEBHOOK_JOB],
            "filter": {"job_type": WEBHOOK_JOB, "endpoint": row.name},
        }
        findings.append(Finding(rules.ENDPOINT_PAUSED, row.name, message, 1, details))
    return findings


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"


def find_failed_schedules(
    conn: sa.Connection, now: datetime, cfg: rules.ScheduleFailed
) -> list[Finding]:
    """Schedules whose last run ended dead and is still waiting for a decision."""
    last = jobs.alias("last_job")
    query = (
        sa.select(
            schedules.c.name,
            schedules.c.job_type,
            last.c.id,
            last.c.last_error,
            last.c.finished_at,
        )
        .select_from(schedules.join(last, last.c.id == schedules.c.last_job_id))
        .where(last.c.status == JobStatus.DEAD.value, last.c.resolution.is_(None))
        .order_by(schedules.c.name)
    )
    findings = []
    for row in conn.execute(query):
        error = _first_line(row.last_error or "")
        message = f"schedule {row.name}: its last run (job #{row.id}) died"
        if error:
            message += f": {error}"
        details = {
            "schedule": row.name,
            "job_id": row.id,
            "job_types": [row.job_type],
            "error": error,
            "filter": {"job_type": row.job_type, "status": JobStatus.DEAD.value},
        }
        findings.append(Finding(rules.SCHEDULE_FAILED, row.name, message, 1, details))
    return findings


def evaluate_rule(
    conn: sa.Connection, rule: str, now: datetime, config: rules.AlertConfig
) -> list[Finding]:
    """Findings of one rule (none when it is disabled)."""
    cfg = config.rule(rule)
    if not cfg.enabled:
        return []
    if isinstance(cfg, rules.DeadLetterSpike):
        return find_dead_letter_spikes(conn, now, cfg, open_alerts_of(conn, rule))
    if isinstance(cfg, rules.RepeatedError):
        return find_repeated_errors(conn, now, cfg)
    if isinstance(cfg, rules.QueueStalled):
        return find_stalled_queues(conn, now, cfg)
    if isinstance(cfg, rules.NoConsumer):
        return find_missing_consumers(conn, now, cfg, config.heartbeat_seconds)
    if isinstance(cfg, rules.BreakerOpen):
        return find_open_breakers(conn, now, cfg)
    if isinstance(cfg, rules.EndpointPaused):
        return find_paused_endpoints(conn, now, cfg)
    if isinstance(cfg, rules.ScheduleFailed):
        return find_failed_schedules(conn, now, cfg)
    raise ValueError(f"unknown alert rule {rule!r}")


def open_alerts_of(conn: sa.Connection, rule: str) -> dict[str, sa.Row[Any]]:
    query = sa.select(alerts).where(alerts.c.rule == rule, alerts.c.status == AlertStatus.OPEN)
    return {row.subject: row for row in conn.execute(query)}
