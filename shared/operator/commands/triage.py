"""Dead-letter triage: retry as a new job, fix the payload and retry, ignore with a
reason — for one job or in bulk — each writing its audit rows in the same transaction.

Dead jobs never change state. A decision is written ON the dead row (`resolution`,
`resolved_by`, `resolved_at`, `resolution_reason`) with a compare-and-set
`WHERE status = 'dead' AND resolution IS NULL`: of two operators acting on the same job
the second changes nothing and gets `ConflictError` (for a single job) or sees it
counted as "already resolved" (in bulk), so a double-submitted form never retries a job
twice. A retry inserts a NEW job (new id, `retried_from_id` = the dead one) copying
type, queue, payload, priority, max_attempts, timeout, group and idempotency key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core import decisions
from jobdesk.shared.core.audit import AuditAction
from jobdesk.shared.core.decisions import requeue_dead
from jobdesk.shared.core.errors import ConflictError, NotFoundError, ValidationError
from jobdesk.shared.core.json_text import check_json_numbers
from jobdesk.shared.core.masking import MASK, mask_payload
from jobdesk.shared.core.models import jobs
from jobdesk.shared.core.payload_checks import PayloadErrors, refuse_unrunnable
from jobdesk.shared.core.states import JobStatus, Resolution
from jobdesk.shared.core.validation import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    REASON_MAX_CHARS,
    check_reason,
    serialize_payload,
)
from jobdesk.shared.core.worker_registry import runnable_types
from jobdesk.shared.operator.filters import JobFilters
from jobdesk.shared.operator.queries.jobs import filter_conditions
from jobdesk.shared.operator.queries.live import first_entry_of_action
from jobdesk.shared.webhooks.models import webhook_endpoints

#: The most jobs one bulk action touches. One action is one transaction: every job adds
#: a resolution write, a new row and an audit row, so 1,000 keeps the transaction to
#: about a second and its row locks short enough not to stall the workers claiming from
#: the same table. Larger backlogs are handled by repeating the action; the preview
#: says how many will remain.
BULK_CAP = 1000
#: Rows written per statement inside a bulk action.
BATCH_SIZE = 200
WEBHOOK_TYPE = "webhook.deliver"


__all__ = [
    "BULK_CAP",
    "REASON_MAX_CHARS",
    "BulkResult",
    "Impact",
    "Selection",
    "bulk_ignore",
    "bulk_retry",
    "check_reason",
    "fix_and_retry",
    "ignore_dead",
    "payload_diff",
    "preview_bulk",
    "register_destination_fields",
    "restore_masked",
    "restore_masked_values",
    "retry_dead",
    "runnable_types",
    "validate_fixed_payload",
]


def _unknown_type_error(job_type: str) -> ValidationError:
    return ValidationError(
        "job_type",
        f"job type {job_type!r} is not known here and no registered worker runs it, so a "
        "retry would never run; deploy a worker that handles it, or ignore the job with a "
        "reason",
    )


def _dead_row(conn: sa.Connection, job_id: int) -> Any:
    row = conn.execute(
        sa.select(
            jobs.c.id,
            jobs.c.job_type,
            jobs.c.status,
            jobs.c.payload,
            jobs.c.resolution,
            jobs.c.resolved_by,
            jobs.c.resolved_at,
        ).where(jobs.c.id == job_id)
    ).one_or_none()
    if row is None:
        raise NotFoundError(f"job #{job_id} does not exist")
    return row


def _conflict(row: Any) -> ConflictError:
    if row.status != JobStatus.DEAD.value:
        return ConflictError(f"job #{row.id} is {row.status}, not dead; only dead jobs are triaged")
    when = row.resolved_at.strftime("%Y-%m-%d %H:%M:%S UTC") if row.resolved_at else "?"
    return ConflictError(
        f"job #{row.id} was already {row.resolution} by {row.resolved_by} at {when}"
    )


def _check_triageable(row: Any) -> None:
    if row.status != JobStatus.DEAD.value or row.resolution is not None:
        raise _conflict(row)


# --- one job -----------------------------------------------------------------------------


def retry_dead(
    conn: sa.Connection, job_id: int, *, actor: str, reason: str | None = None, now: datetime
) -> int:
    """Retry dead job `job_id` as a new job; returns the new job's id."""
    reason = check_reason(reason, required=False)
    row = _dead_row(conn, job_id)
    _check_triageable(row)
    if row.job_type not in runnable_types(conn):
        raise _unknown_type_error(row.job_type)
    done = requeue_dead(conn, [job_id], actor=actor, reason=reason, now=now)
    if job_id not in done.new_ids:
        raise _conflict(_dead_row(conn, job_id))
    return done.new_ids[job_id]


#: Payload fields that say where a job's effect goes, per job type. A fix that changes
#: one of them while keeping secrets the form showed as `***` would deliver those
#: secrets to a destination the operator never saw them go to: refused unless the
#: operator explicitly chooses to keep them. Types not listed here (an app's own) are
#: treated as if any edit could change the destination.
DESTINATION_FIELDS: dict[str, tuple[str, ...]] = {
    "webhook.deliver": ("endpoint",),
    "email.send": ("to", "to_user_id"),
    "report.generate": (),
}
_MISSING: Any = object()


def register_destination_fields(job_type: str, fields: tuple[str, ...]) -> None:
    """Declare which top-level payload fields of `job_type` name its destination (`()`:
    none — the job never sends its data anywhere a payload edit could change)."""
    DESTINATION_FIELDS[job_type] = tuple(fields)


@dataclass(frozen=True, slots=True)
class Restored:
    """An edited payload with the masked values the operator left untouched put back."""

    payload: Any
    #: Paths (`token`, `data.headers[0]`) whose stored value was put back.
    kept: tuple[str, ...]
    #: Paths still holding `***` that did not come back whole: a partly edited masked
    #: string (`"Authorization: *** x"`) or a mask copied elsewhere.
    leftover: tuple[str, ...]


def _join(path: str, key: object) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def _restore(
    original: Any, shown: Any, edited: Any, path: str, kept: list[str], leftover: list[str]
) -> Any:
    if isinstance(edited, Mapping):
        before = original if isinstance(original, Mapping) else {}
        seen = shown if isinstance(shown, Mapping) else {}
        return {
            key: _restore(
                before.get(key, _MISSING), seen.get(key, _MISSING), value,
                _join(path, key), kept, leftover,
            )
            for key, value in edited.items()
        }  # fmt: skip
    if isinstance(edited, list):
        before_list = original if isinstance(original, list) else []
        seen_list = shown if isinstance(shown, list) else []
        return [
            _restore(
                before_list[i] if i < len(before_list) else _MISSING,
                seen_list[i] if i < len(seen_list) else _MISSING,
                item, _join(path, i), kept, leftover,
            )
            for i, item in enumerate(edited)
        ]  # fmt: skip
    if isinstance(edited, str) and original is not _MISSING and edited == shown != original:
        # Exactly what the form showed for a masked value — whole (`***`) or partly
        # masked (`Authorization: ***`): the operator kept it, so keep the stored one.
        kept.append(path)
        return original
    if isinstance(edited, str) and MASK in edited and edited != original:
        leftover.append(path)
    return edited


def restore_masked_values(original: Any, edited: Any) -> Restored:
    """Put back what the edit form showed masked and the operator left exactly as shown;
    report any `***` that would otherwise be saved as data."""
    kept: list[str] = []
    leftover: list[str] = []
    payload = _restore(original, mask_payload(original), edited, "", kept, leftover)
    return Restored(payload, tuple(kept), tuple(leftover))


def restore_masked(original: Any, edited: Any) -> Any:
    """`restore_masked_values(...).payload`."""
    return restore_masked_values(original, edited).payload


def _destination_change(
    job_type: str, before: Mapping[str, Any], after: Mapping[str, Any], kept: tuple[str, ...]
) -> str | None:
    """How the edit may change where the job's effect goes (None: it does not)."""
    fields = DESTINATION_FIELDS.get(job_type)
    if fields is None:
        changed = [
            path
            for part in payload_diff(before, after).values()
            for path in part
            if path not in kept
        ]
        if not changed:
            return None
        return (
            f"job type {job_type!r} declares no destination fields, so any edit "
            f"({', '.join(changed[:3])}) may send them somewhere else"
        )
    moved = [f for f in fields if before.get(f, _MISSING) != after.get(f, _MISSING)]
    if not moved:
        return None
    shown = mask_payload({f: after.get(f) for f in moved}, mask_emails=False)
    return "the destination changed (" + ", ".join(f"{f} → {shown[f]!r}" for f in moved) + ")"


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping) and value:
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    if isinstance(value, list) and value:
        flat = {}
        for index, item in enumerate(value):
            flat.update(_flatten(item, f"{prefix}[{index}]"))
        return flat
    return {prefix or "(root)": value}


def payload_diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """What really changed, path by path, with secrets masked on both sides. A change
    the masking hides (`***` → `***`) is still listed, marked `masked_change`."""
    raw_before, raw_after = _flatten(before), _flatten(after)
    shown_before, shown_after = _flatten(mask_payload(before)), _flatten(mask_payload(after))
    changed: dict[str, Any] = {}
    for path in sorted(raw_before.keys() & raw_after.keys()):
        if raw_before[path] == raw_after[path]:
            continue
        change = {"before": shown_before.get(path), "after": shown_after.get(path)}
        if change["before"] == change["after"]:
            change["masked_change"] = True
        changed[path] = change
    added = {path: shown_after.get(path) for path in sorted(raw_after.keys() - raw_before.keys())}
    removed = {
        path: shown_before.get(path) for path in sorted(raw_before.keys() - raw_after.keys())
    }
    return {"changed": changed, "added": added, "removed": removed}


def validate_fixed_payload(
    job_type: str, payload: object, *, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
) -> dict[str, Any]:
    """The same rules as enqueue (strict JSON, size) plus the type's own checks, and
    numbers within the bounds of JSON text typed by a person (`core.json_text`)."""
    serialize_payload(payload, max_bytes)
    check_json_numbers(payload, "payload")
    assert isinstance(payload, Mapping)
    refuse_unrunnable(job_type, payload)
    return dict(payload)


def fix_and_retry(
    conn: sa.Connection,
    job_id: int,
    payload: Mapping[str, Any],
    *,
    actor: str,
    reason: str | None = None,
    now: datetime,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    keep_secrets: bool = False,
) -> int:
    """Retry dead job `job_id` as a new job with an edited payload; returns the new id.

    The form shows secrets as `***` (whole values, or the secret part of a string);
    values left exactly as shown keep their stored value. Two things are refused
    (`ValidationError`): a `***` that would be saved as data (a partly edited masked
    string), and keeping stored secrets while the edit changes the job's destination
    (`DESTINATION_FIELDS`) — unless `keep_secrets` says the operator chose that. The
    audit row stores a masked diff of what really changed and which secrets were kept.
    """
    reason = check_reason(reason, required=False)
    row = _dead_row(conn, job_id)
    _check_triageable(row)
    if row.job_type not in runnable_types(conn):
        raise _unknown_type_error(row.job_type)
    restored = restore_masked_values(row.payload, payload)
    if restored.leftover:
        raise PayloadErrors(
            [
                ValidationError(
                    f"payload.{path}",
                    "still contains *** from a masked value: type the whole value again, "
                    "or leave the masked text exactly as shown to keep the stored one",
                )
                for path in restored.leftover
            ]
        )
    fixed = validate_fixed_payload(row.job_type, restored.payload, max_bytes=max_payload_bytes)
    before = row.payload or {}
    details: dict[str, Any] = {"diff": payload_diff(before, fixed)}
    if restored.kept:
        details["kept_secrets"] = list(restored.kept)
        moved = _destination_change(row.job_type, before, fixed, restored.kept)
        if moved is not None and not keep_secrets:
            raise ValidationError(
                "payload",
                f"{moved}, and the stored secrets at {', '.join(restored.kept)} would go "
                "there too. Type them again (or remove them), or confirm that the new "
                "destination may receive the stored secrets",
            )
        if moved is not None:
            details["kept_secrets_for_new_destination"] = True
    done = requeue_dead(
        conn,
        [job_id],
        actor=actor,
        reason=reason,
        now=now,
        action=AuditAction.FIX_RETRY,
        resolution=Resolution.FIXED,
        payload=fixed,
        details=details,
    )
    if job_id not in done.new_ids:
        raise _conflict(_dead_row(conn, job_id))
    return done.new_ids[job_id]


def ignore_dead(
    conn: sa.Connection, job_id: int, *, actor: str, reason: str | None, now: datetime
) -> None:
    """Resolve dead job `job_id` as ignored; the reason is required and bounded."""
    clean = check_reason(reason, required=True)
    assert clean is not None
    row = _dead_row(conn, job_id)
    _check_triageable(row)
    if not decisions.ignore_dead(conn, [job_id], actor=actor, reason=clean, now=now):
        raise _conflict(_dead_row(conn, job_id))


# --- bulk --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Selection:
    """Which dead jobs a bulk action covers: explicit ids, or a filter limited to the id
    range the preview showed (so submitting the same confirmation twice cannot reach
    past what was previewed)."""

    ids: tuple[int, ...] = ()
    filters: JobFilters | None = None
    id_range: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if bool(self.ids) == (self.filters is not None):
            raise ValidationError("selection", "select some jobs, or choose all matching a filter")
        if len(self.ids) > BULK_CAP:
            raise ValidationError(
                "ids", f"{len(self.ids):,} jobs selected; one action handles at most {BULK_CAP:,}"
            )


@dataclass(frozen=True, slots=True)
class Impact:
    """What a bulk action would do (shown before confirming)."""

    matching: int
    selected: int
    capped: bool
    types: dict[str, int]
    unknown_types: dict[str, int]
    paused_endpoint: int
    not_triageable: int
    id_range: tuple[int, int] | None
    cap: int = BULK_CAP


def _paused_endpoints(conn: sa.Connection, now: datetime) -> set[str]:
    query = sa.select(webhook_endpoints.c.name).where(
        webhook_endpoints.c.paused.is_(sa.true()),
        sa.or_(webhook_endpoints.c.paused_until.is_(None), webhook_endpoints.c.paused_until > now),
    )
    return set(conn.execute(query).scalars())


def _triageable() -> list[sa.ColumnElement[bool]]:
    return [jobs.c.status == JobStatus.DEAD.value, jobs.c.resolution.is_(None)]


def _selected_rows(conn: sa.Connection, selection: Selection, now: datetime, cap: int) -> list[Any]:
    columns = (jobs.c.id, jobs.c.job_type, jobs.c.payload["endpoint"].as_string().label("ep"))
    if selection.ids:
        query = sa.select(*columns).where(jobs.c.id.in_(selection.ids), *_triageable())
    else:
        assert selection.filters is not None
        conditions = filter_conditions(conn, selection.filters.dead_unresolved(), now)
        query = sa.select(*columns).where(*conditions)
        if selection.id_range is not None:
            low, high = selection.id_range
            query = query.where(jobs.c.id.between(low, high))
    return list(conn.execute(query.order_by(jobs.c.id).limit(cap)))


def preview_bulk(
    conn: sa.Connection, selection: Selection, *, now: datetime, cap: int = BULK_CAP
) -> Impact:
    """Count, types, unknown types and paused-endpoint targets of a bulk action."""
    rows = _selected_rows(conn, selection, now, cap)
    if selection.ids:
        matching = len(rows)
        not_triageable = len(set(selection.ids)) - len(rows)
    else:
        assert selection.filters is not None
        conditions = filter_conditions(conn, selection.filters.dead_unresolved(), now)
        matching = int(conn.execute(sa.select(sa.func.count()).where(*conditions)).scalar_one())
        not_triageable = 0
    known = runnable_types(conn)
    paused = _paused_endpoints(conn, now)
    types: dict[str, int] = {}
    unknown: dict[str, int] = {}
    paused_count = 0
    for row in rows:
        types[row.job_type] = types.get(row.job_type, 0) + 1
        if row.job_type not in known:
            unknown[row.job_type] = unknown.get(row.job_type, 0) + 1
        if row.job_type == WEBHOOK_TYPE and row.ep in paused:
            paused_count += 1
    return Impact(
        matching=matching,
        selected=len(rows),
        capped=matching > len(rows),
        types=dict(sorted(types.items(), key=lambda kv: -kv[1])),
        unknown_types=unknown,
        paused_endpoint=paused_count,
        not_triageable=not_triageable,
        id_range=(rows[0].id, rows[-1].id) if rows else None,
        cap=cap,
    )


@dataclass(slots=True)
class BulkResult:
    action: str
    done: int = 0
    new_job_ids: list[int] = field(default_factory=list)
    already_resolved: int = 0
    unknown_type: int = 0
    #: The first audit entry the action wrote (None when it did nothing): the jobs list's
    #: `from_audit` filter shows exactly the jobs this action made.
    audit_id: int | None = None


def _batches(items: list[int], size: int) -> Iterable[list[int]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def bulk_retry(
    conn: sa.Connection,
    selection: Selection,
    *,
    actor: str,
    reason: str | None = None,
    now: datetime,
    cap: int = BULK_CAP,
) -> BulkResult:
    """Retry up to `cap` selected dead jobs as new jobs, in batches; unknown types are
    skipped and counted, jobs someone else resolved meanwhile are counted, not redone."""
    reason = check_reason(reason, required=False)
    rows = _selected_rows(conn, selection, now, cap)
    known = runnable_types(conn)
    result = BulkResult("retry")
    wanted = [row.id for row in rows if row.job_type in known]
    result.unknown_type = len(rows) - len(wanted)
    requested = len(set(selection.ids)) if selection.ids else len(rows)
    for batch in _batches(wanted, BATCH_SIZE):
        done = requeue_dead(
            conn, batch, actor=actor, reason=reason, now=now, details={"bulk": True}
        )
        result.done += len(done.new_ids)
        result.new_job_ids.extend(done.new_ids.values())
    result.already_resolved = requested - result.done - result.unknown_type
    if result.done:
        result.audit_id = first_entry_of_action(conn, actor=actor, action=AuditAction.RETRY, at=now)
    return result


def bulk_ignore(
    conn: sa.Connection,
    selection: Selection,
    *,
    actor: str,
    reason: str | None,
    now: datetime,
    cap: int = BULK_CAP,
) -> BulkResult:
    """Ignore up to `cap` selected dead jobs with one required reason, in batches."""
    clean = check_reason(reason, required=True)
    assert clean is not None
    rows = _selected_rows(conn, selection, now, cap)
    requested = len(set(selection.ids)) if selection.ids else len(rows)
    result = BulkResult("ignore")
    for batch in _batches([row.id for row in rows], BATCH_SIZE):
        resolved = decisions.ignore_dead(
            conn, batch, actor=actor, reason=clean, now=now, details={"bulk": True}
        )
        result.done += len(resolved)
    result.already_resolved = requested - result.done
    return result
