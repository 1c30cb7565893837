"""Alerts: rules evaluated from the database, opened, refreshed and resolved without duplicates.

A rule turns the database at a fixed `now` into `Finding`s, one per subject (a job type,
a queue, an error fingerprint, a breaker, an endpoint). `apply_findings` reconciles them
with the `alerts` table:

- a subject that fires and has no open alert opens one; the partial unique index
  `uq_jobdesk_alerts_open_rule_subject` (INSERT … ON CONFLICT DO NOTHING) makes "one open alert
  per (rule, subject)" a database fact, so two leaders evaluating during a hand-over
  open one row between them;
- a subject that fires again refreshes its open alert (`last_seen_at`, `count`, message);
- an open alert whose subject no longer fires resolves; the row stays as history;
- a subject that fires again within the rule's cooldown after resolving reopens its
  last alert instead of paging again (flapping).

Only a newly opened alert notifies, and only after claiming its once-per-slot
`notify_key` (unique column): the slot is the cooldown period the opening falls in, so
whatever races, one notification goes out per (rule, subject, slot). Notifications are
Jobdesk's own `email.send` / `webhook.deliver` jobs enqueued in the same transaction with
the key as idempotency key — retried and visible like any job. An alert about a channel
itself (its job type, queue, endpoint or breaker) is not sent through that channel, so a
broken alert webhook cannot feed its own alerts.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.dialects import sqlite

from jobdesk.shared.alerts.models import AlertStatus, alerts
from jobdesk.shared.core.audit import AuditAction, audit_log
from jobdesk.shared.core.db import is_postgresql
from jobdesk.shared.core.enqueue import enqueue
from jobdesk.shared.core.job_types import defaults_for
from jobdesk.shared.core.models import KEY_LENGTH, job_attempts, jobs
from jobdesk.shared.core.states import AttemptOutcome, JobStatus
from jobdesk.shared.limits.models import BreakerState, circuit_breakers
from jobdesk.shared.operator.metrics_queries import due_backlog, live_after, live_workers
from jobdesk.shared.settings import alerts as rules
from jobdesk.shared.webhooks.models import webhook_endpoints

log = logging.getLogger("jobdesk.alerts")

OPEN, RESOLVED = AlertStatus.OPEN, AlertStatus.RESOLVED
EMAIL = "email"
WEBHOOK = "webhook"
EMAIL_JOB = "email.send"
WEBHOOK_JOB = "webhook.deliver"
ALERT_EVENT = "jobdesk.alert"
ALERT_TEMPLATE = "alert"
#: Slots are at least this long, so a zero cooldown still cannot page twice in a burst.
MIN_SLOT = timedelta(minutes=1)
EXCERPT_CHARS = 300


@dataclass(frozen=True)
class Finding:
    """A rule firing for one subject at `now`."""

    rule: str
    subject: str
    message: str
    count: int
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class RuleOutcome:
    """What reconciling one rule's findings did (alert ids)."""

    opened: list[int] = field(default_factory=list)
    reopened: list[int] = field(default_factory=list)
    refreshed: list[int] = field(default_factory=list)
    resolved: list[int] = field(default_factory=list)
    notification_jobs: list[int] = field(default_factory=list)
    suppressed: list[int] = field(default_factory=list)


# --- the rules -----------------------------------------------------------------------


def _minutes(value: float) -> timedelta:
    return timedelta(minutes=value)


def _endpoint_expr() -> sa.ColumnElement[Any]:
    return sa.case(
        (jobs.c.job_type == WEBHOOK_JOB, jobs.c.payload["endpoint"].as_string()),
        else_=sa.null(),
    )


def _type_subject(job_type: str, endpoint: str | None) -> str:
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
    window = _minutes(cfg.window_minutes)
    start = now - window
    base_start = start - _minutes(cfg.baseline_minutes)
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
        subject = _type_subject(row.job_type, row.endpoint)
        found[subject] = _spike_finding(
            subject, row.job_type, row.endpoint, count, cfg, expected=expected, since=start
        )
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
            found[subject] = _spike_finding(
                subject, job_type, details.get("endpoint"), held, cfg, expected=None, since=since
            )
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


def _spike_finding(
    subject: str,
    job_type: str,
    endpoint: str | None,
    count: int,
    cfg: rules.DeadLetterSpike,
    *,
    expected: float | None,
    since: datetime,
) -> Finding:
    target = f"{job_type} to {endpoint}" if endpoint else job_type
    if expected is None:
        message = f"{count} dead letters of {target} still unresolved since {since:%H:%M} UTC"
    else:
        message = (
            f"{count} dead letters of {target} in the last {cfg.window_minutes:g} min "
            f"(baseline {expected:.1f} per window)"
        )
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
    start = now - _minutes(cfg.window_minutes)
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
    return str(value or "")[:EXCERPT_CHARS]


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "(no message)"
    return line[:200]


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
        error = str(row.last_error or "")[:EXCERPT_CHARS]
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
    raise ValueError(f"unknown alert rule {rule!r}")


# --- reconciling with the alerts table -------------------------------------------------


def open_alerts_of(conn: sa.Connection, rule: str) -> dict[str, sa.Row[Any]]:
    query = sa.select(alerts).where(alerts.c.rule == rule, alerts.c.status == OPEN)
    return {row.subject: row for row in conn.execute(query)}


def apply_findings(
    conn: sa.Connection,
    rule: str,
    findings: Sequence[Finding],
    *,
    now: datetime,
    config: rules.AlertConfig,
) -> RuleOutcome:
    """Open, refresh, reopen and resolve `rule`'s alerts to match `findings`; notify new ones.

    Subjects are handled in sorted order so two concurrent evaluators lock rows in the
    same order (no deadlock on PostgreSQL).
    """
    outcome = RuleOutcome()
    cooldown = _minutes(config.rule(rule).cooldown_minutes)
    current = open_alerts_of(conn, rule)
    firing = {f.subject: f for f in findings}
    for subject in sorted(firing):
        finding = firing[subject]
        values = _values(finding, now)
        existing = current.get(subject)
        if existing is not None:
            related = (existing.details or {}).get("related_alert_id")
            if related is not None:
                values["details"] = {**finding.details, "related_alert_id": related}
            conn.execute(sa.update(alerts).where(alerts.c.id == existing.id).values(**values))
            outcome.refreshed.append(existing.id)
            continue
        reopened = _reopen_recent(conn, finding, values, now - cooldown)
        if reopened is not None:
            outcome.reopened.append(reopened)
            log.warning(
                "alert reopened within cooldown (not notified again): %s %s: %s",
                rule,
                subject,
                finding.message,
                extra={"action": "alert_reopened", "alert_id": reopened, "rule": rule},
            )
            continue
        alert_id = _insert_open(conn, finding, values, now)
        if alert_id is None:
            # Another evaluator opened it a moment ago; it also notifies.
            continue
        outcome.opened.append(alert_id)
        log.warning(
            "alert opened: %s %s: %s",
            rule,
            subject,
            finding.message,
            extra={"action": "alert_opened", "alert_id": alert_id, "rule": rule},
        )
        related = _related_open_alert(conn, finding)
        if related is not None:
            # Same incident already paged through the sibling rule: record, don't page.
            _mark_related(conn, alert_id, finding, related)
            outcome.suppressed.append(alert_id)
            continue
        key = notify_key(rule, subject, now, cooldown)
        if _claim_notify_key(conn, alert_id, key):
            outcome.notification_jobs += _notify(conn, finding, key, OPEN, now, config)
        else:
            outcome.suppressed.append(alert_id)
    for subject in sorted(set(current) - set(firing)):
        row = current[subject]
        resolved = conn.execute(
            sa.update(alerts)
            .where(alerts.c.id == row.id, alerts.c.status == OPEN)
            .values(status=RESOLVED, resolved_at=now)
            .returning(alerts.c.id)
        ).first()
        if resolved is None:
            continue
        outcome.resolved.append(row.id)
        log.info(
            "alert resolved: %s %s",
            rule,
            subject,
            extra={"action": "alert_resolved", "alert_id": row.id, "rule": rule},
        )
        if row.notify_key:
            finding = Finding(
                rule, subject, f"resolved: {row.message}", row._mapping["count"], row.details or {}
            )
            outcome.notification_jobs += _notify(
                conn, finding, f"{row.notify_key}:resolved", RESOLVED, now, config
            )
    return outcome


def _values(finding: Finding, now: datetime) -> dict[str, Any]:
    return {
        "last_seen_at": now,
        "count": finding.count,
        "message": finding.message,
        "details": finding.details,
    }


def _reopen_recent(
    conn: sa.Connection, finding: Finding, values: dict[str, Any], resolved_after: datetime
) -> int | None:
    last = conn.execute(
        sa.select(alerts.c.id)
        .where(
            alerts.c.rule == finding.rule,
            alerts.c.subject == finding.subject,
            alerts.c.status == RESOLVED,
            alerts.c.resolved_at > resolved_after,
        )
        .order_by(alerts.c.resolved_at.desc(), alerts.c.id.desc())
        .limit(1)
    ).scalar()
    if last is None:
        return None
    try:
        with conn.begin_nested():
            row = conn.execute(
                sa.update(alerts)
                .where(alerts.c.id == last, alerts.c.status == RESOLVED)
                .values(status=OPEN, resolved_at=None, **values)
                .returning(alerts.c.id)
            ).first()
    except sa.exc.IntegrityError:
        # Someone opened (rule, subject) concurrently: theirs is the open alert.
        return None
    return int(row.id) if row is not None else None


def _insert_open(
    conn: sa.Connection, finding: Finding, values: dict[str, Any], now: datetime
) -> int | None:
    row = {"rule": finding.rule, "subject": finding.subject, "status": OPEN, "opened_at": now}
    row.update(values)
    dialect_insert = pg.insert if is_postgresql(conn) else sqlite.insert
    statement = (
        dialect_insert(alerts)
        .values(**row)
        .on_conflict_do_nothing(
            index_elements=[alerts.c.rule, alerts.c.subject],
            index_where=alerts.c.status == OPEN,
        )
        .returning(alerts.c.id)
    )
    inserted = conn.execute(statement).first()
    return int(inserted.id) if inserted is not None else None


def _incident_subjects(details: dict[str, Any]) -> set[str]:
    """The dead-letter-spike subjects (`type` / `webhook.deliver:endpoint`) an alert is about."""
    job_types = [t for t in details.get("job_types") or [] if isinstance(t, str)]
    endpoints = [e for e in details.get("endpoints") or [] if isinstance(e, str)]
    subjects: set[str] = set()
    for job_type in job_types:
        if job_type == WEBHOOK_JOB and endpoints:
            subjects.update(_type_subject(job_type, e) for e in endpoints)
        else:
            subjects.add(job_type)
    return subjects


def _related_open_alert(conn: sa.Connection, finding: Finding) -> int | None:
    """An open, notified alert of the sibling rule about the same incident, if any.

    A dead-letter spike and a repeated error on the same job type / endpoint are one
    incident (the sign-up story's CRM outage trips both): whichever opens first pages,
    the other is recorded and linked without paging again.
    """
    if finding.rule == rules.DEAD_LETTER_SPIKE:
        sibling = rules.REPEATED_ERROR
    elif finding.rule == rules.REPEATED_ERROR:
        sibling = rules.DEAD_LETTER_SPIKE
    else:
        return None
    mine = _incident_subjects(finding.details)
    if not mine:
        return None
    query = (
        sa.select(alerts.c.id, alerts.c.subject, alerts.c.details)
        .where(alerts.c.rule == sibling, alerts.c.status == OPEN)
        .where(alerts.c.notify_key.is_not(None))
        .order_by(alerts.c.id)
    )
    rows = list(conn.execute(query))
    if sibling == rules.DEAD_LETTER_SPIKE:
        spikes = {row.subject: int(row.id) for row in rows}
        return min(spikes[s] for s in mine) if mine <= set(spikes) else None
    for row in rows:
        if mine <= _incident_subjects(row.details or {}):
            return int(row.id)
    return None


def _mark_related(conn: sa.Connection, alert_id: int, finding: Finding, related: int) -> None:
    details = {**finding.details, "related_alert_id": related}
    conn.execute(sa.update(alerts).where(alerts.c.id == alert_id).values(details=details))
    log.info(
        "alert %s %s is part of the incident of alert #%s; not notified again",
        finding.rule,
        finding.subject,
        related,
        extra={"action": "alert_notify_related", "alert_id": alert_id, "related": related},
    )


def notify_key(rule: str, subject: str, now: datetime, cooldown: timedelta) -> str:
    """`alert:<rule>:<subject>:<slot>` — one notification per slot of the cooldown.

    Long subjects are replaced by a digest so the key (and the `:resolved:webhook`
    idempotency keys derived from it) fits the key columns.
    """
    slot_seconds = max(cooldown, MIN_SLOT).total_seconds()
    slot = int(now.timestamp() // slot_seconds)
    key = f"alert:{rule}:{subject}:{slot}"
    if len(key) > KEY_LENGTH - 20:
        digest = hashlib.sha256(subject.encode("utf-8")).hexdigest()[:24]
        key = f"alert:{rule}:{digest}:{slot}"
    return key


def _claim_notify_key(conn: sa.Connection, alert_id: int, key: str) -> bool:
    try:
        with conn.begin_nested():
            row = conn.execute(
                sa.update(alerts)
                .where(alerts.c.id == alert_id, alerts.c.notify_key.is_(None))
                .values(notify_key=key)
                .returning(alerts.c.id)
            ).first()
    except sa.exc.IntegrityError:
        log.info(
            "alert notification for slot %s already sent",
            key,
            extra={"action": "alert_notify_suppressed", "alert_id": alert_id},
        )
        return False
    return row is not None


def excluded_channels(finding: Finding, config: rules.AlertConfig) -> set[str]:
    """Channels an alert must not use because it is about that channel itself."""
    details = finding.details
    job_types = set(details.get("job_types") or [])
    endpoints = set(details.get("endpoints") or [])
    queue = details.get("queue")
    excluded: set[str] = set()
    if EMAIL_JOB in job_types or queue == defaults_for(EMAIL_JOB).queue:
        excluded.add(EMAIL)
    if finding.rule == rules.BREAKER_OPEN and _breaker_mentions(
        finding.subject, ("smtp", "email", "mail")
    ):
        excluded.add(EMAIL)
    name = config.webhook_endpoint
    if name:
        if name in endpoints or queue == defaults_for(WEBHOOK_JOB).queue:
            excluded.add(WEBHOOK)
        if finding.rule == rules.BREAKER_OPEN and _breaker_mentions(finding.subject, (name,)):
            excluded.add(WEBHOOK)
        if finding.rule == rules.ENDPOINT_PAUSED and finding.subject == name:
            excluded.add(WEBHOOK)
    return excluded


def _breaker_mentions(key: str, names: tuple[str, ...]) -> bool:
    parts = set(key.replace("/", ":").split(":"))
    return any(name in parts for name in names)


def _notify(
    conn: sa.Connection,
    finding: Finding,
    key: str,
    state: str,
    now: datetime,
    config: rules.AlertConfig,
) -> list[int]:
    """Enqueue the configured channels' delivery jobs; returns their ids."""
    excluded = excluded_channels(finding, config)
    context = {
        "rule": finding.rule,
        "subject": finding.subject,
        "state": state,
        "message": finding.message,
        "count": finding.count,
        "at": now.isoformat(),
        "details": finding.details,
    }
    if config.dashboard_url:
        context["link"] = f"{config.dashboard_url}/alerts"
    job_ids: list[int] = []
    for channel in (EMAIL, WEBHOOK):
        target = config.email if channel == EMAIL else config.webhook_endpoint
        if not target:
            continue
        if channel in excluded:
            log.warning(
                "alert about the %s channel itself not sent through it: %s %s",
                channel,
                finding.rule,
                finding.subject,
                extra={"action": "alert_channel_skipped", "channel": channel, "rule": finding.rule},
            )
            continue
        if channel == EMAIL:
            payload: dict[str, Any] = {
                "to": target,
                "template": ALERT_TEMPLATE,
                "event_id": key,
                "context": context,
            }
            job_type = EMAIL_JOB
        else:
            if not _endpoint_exists(conn, target):
                log.error(
                    "alert webhook endpoint %r is not configured; alert not sent there",
                    target,
                    extra={"action": "alert_channel_missing", "channel": channel},
                )
                continue
            payload = {"endpoint": target, "event": ALERT_EVENT, "data": context}
            job_type = WEBHOOK_JOB
        job_ids.append(enqueue(conn, job_type, payload, idempotency_key=f"{key}:{channel}"))
    return job_ids


def _endpoint_exists(conn: sa.Connection, name: str) -> bool:
    query = sa.select(webhook_endpoints.c.id).where(webhook_endpoints.c.name == name)
    return conn.execute(query).first() is not None


# --- reading and acknowledging -----------------------------------------------------------


def list_alerts(
    conn: sa.Connection,
    *,
    status: str | None = None,
    rule: str | None = None,
    limit: int = 100,
    before_id: int | None = None,
) -> list[sa.Row[Any]]:
    """Alerts newest first (keyset pagination by id)."""
    query = sa.select(alerts).order_by(alerts.c.id.desc()).limit(limit)
    if status is not None:
        if status not in (OPEN, RESOLVED):
            raise ValueError(f"status must be {OPEN} or {RESOLVED}, got {status!r}")
        query = query.where(alerts.c.status == status)
    if rule is not None:
        query = query.where(alerts.c.rule == rule)
    if before_id is not None:
        query = query.where(alerts.c.id < before_id)
    return list(conn.execute(query))


def count_open_alerts(conn: sa.Connection) -> int:
    query = sa.select(sa.func.count()).select_from(alerts).where(alerts.c.status == OPEN)
    return int(conn.execute(query).scalar_one())


def acknowledge_alert(
    conn: sa.Connection, alert_id: int, *, actor: str, note: str, now: datetime
) -> bool:
    """Record who looked at an alert and why (audited); False when it does not exist."""
    row = conn.execute(
        sa.update(alerts)
        .where(alerts.c.id == alert_id)
        .values(acknowledged_by=actor, acknowledged_at=now, acknowledged_note=note)
        .returning(alerts.c.rule, alerts.c.subject)
    ).first()
    if row is None:
        return False
    conn.execute(
        sa.insert(audit_log).values(
            at=now,
            actor=actor,
            action=AuditAction.ALERT_ACKNOWLEDGE,
            subject=f"alert:{alert_id}",
            reason=note,
            details={"alert_id": alert_id, "rule": row.rule, "subject": row.subject},
        )
    )
    return True
