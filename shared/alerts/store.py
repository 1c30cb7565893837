"""Alerts opened, refreshed and resolved without duplicates, and their notifications.

The rules (`alerts.rules`) turn the database into `Finding`s; `apply_findings`
reconciles them with the `jobdesk_alerts` table:

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

from jobdesk.shared.alerts.links import alert_links
from jobdesk.shared.alerts.models import AlertStatus, alerts
from jobdesk.shared.alerts.rules import (
    WEBHOOK_JOB,
    Finding,
    minutes,
    open_alerts_of,
    type_subject,
)
from jobdesk.shared.core import audit
from jobdesk.shared.core.audit import AuditAction
from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.enqueue import enqueue
from jobdesk.shared.core.job_types import defaults_for
from jobdesk.shared.core.models import KEY_LENGTH
from jobdesk.shared.settings import alerts as rules
from jobdesk.shared.webhooks.models import webhook_endpoints

log = logging.getLogger("jobdesk.alerts")

OPEN, RESOLVED = AlertStatus.OPEN, AlertStatus.RESOLVED
EMAIL = "email"
WEBHOOK = "webhook"
EMAIL_JOB = "email.send"
ALERT_EVENT = "jobdesk.alert"
ALERT_TEMPLATE = "alert"
#: Slots are at least this long, so a zero cooldown still cannot page twice in a burst.
MIN_SLOT = timedelta(minutes=1)


@dataclass
class RuleOutcome:
    """What reconciling one rule's findings did (alert ids)."""

    opened: list[int] = field(default_factory=list)
    reopened: list[int] = field(default_factory=list)
    refreshed: list[int] = field(default_factory=list)
    resolved: list[int] = field(default_factory=list)
    notification_jobs: list[int] = field(default_factory=list)
    suppressed: list[int] = field(default_factory=list)


# --- reconciling with the alerts table -------------------------------------------------


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
    cooldown = minutes(config.rule(rule).cooldown_minutes)
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
            # The same incident tripped the sibling rule too: both are notified, and each
            # message says which alert it belongs with.
            finding = _mark_related(conn, alert_id, finding, related)
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
    statement = (
        driver(conn)
        .insert(alerts)
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
            subjects.update(type_subject(job_type, e) for e in endpoints)
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


def _mark_related(conn: sa.Connection, alert_id: int, finding: Finding, related: int) -> Finding:
    details = {**finding.details, "related_alert_id": related}
    conn.execute(sa.update(alerts).where(alerts.c.id == alert_id).values(details=details))
    log.info(
        "alert %s %s is part of the incident of alert #%s",
        finding.rule,
        finding.subject,
        related,
        extra={"action": "alert_notify_related", "alert_id": alert_id, "related": related},
    )
    return Finding(finding.rule, finding.subject, finding.message, finding.count, details)


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
    context["error"] = str(finding.details.get("error") or "")
    if config.dashboard_url:
        context["link"] = f"{config.dashboard_url}/alerts"
        context["links"] = [
            {"label": link.label, "url": f"{config.dashboard_url}{link.path}"}
            for link in alert_links(finding.details)
        ]
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
    audit.record(
        conn,
        actor=actor,
        action=AuditAction.ALERT_ACKNOWLEDGE,
        subject=f"alert:{alert_id}",
        reason=note,
        details={"alert_id": alert_id, "rule": row.rule, "subject": row.subject},
        now=now,
    )
    return True
