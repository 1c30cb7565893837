"""The effects ledger: side effects recorded under stable keys so they happen once.

Pattern for an external side effect (email, webhook):

1. `reserve_effect(key, attempt)` and commit — the key is now this attempt's. The answer
   may instead be *done* (skip and reuse the stored detail: "already sent by job #N") or
   *held*: another attempt that still holds its job reserved it and may be sending
   right now, so this one waits (the worker snoozes it) rather than sending too.
2. Do the effect, carrying an id derived from the key (`Message-ID`, `webhook-id`) so the
   receiver can recognise a repeat.
3. `complete_effect(key, attempt, detail)` and commit at once — or `release_effect` when
   the effect certainly did not happen (refused, never connected), so it can run again.

A reservation whose attempt lost its job (the worker died, the lease ran out) is taken
over by the next one: a crash between 2 and 3 repeats the effect once, with the *same*
id, which the receiver deduplicates; two jobs with the same key at the same moment
never both send. For an effect inside this database, record it in the same transaction
as the effect itself (`record_effect`) and it is exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.claim import JobRef
from jobdesk.shared.core.driver import driver
from jobdesk.shared.core.models import EffectState, effects, jobs
from jobdesk.shared.core.states import JobStatus

MAX_KEY_LENGTH = 300


def check_effect_key(key: str) -> str:
    if not key or len(key) > MAX_KEY_LENGTH:
        raise ValueError(f"effect key must be 1-{MAX_KEY_LENGTH} characters")
    return key


def find_effect(conn: sa.Connection, key: str) -> dict[str, Any] | None:
    """The recorded detail of a done effect (an empty dict if none was stored), or None."""
    found = find_done_effect(conn, key)
    return None if found is None else found.done


def find_done_effect(conn: sa.Connection, key: str) -> Reservation | None:
    """A done effect as a `Reservation` to skip: its detail and the job that did it."""
    row = conn.execute(
        sa.select(effects.c.detail, effects.c.job_id).where(
            effects.c.key == check_effect_key(key), effects.c.state == EffectState.DONE.value
        )
    ).first()
    if row is None:
        return None
    return Reservation(done=dict(row.detail or {}), by_job=row.job_id)


@dataclass(frozen=True, slots=True)
class Reservation:
    """The answer to `reserve_effect`: go ahead (`mine`), skip (`done`) or wait (`held`)."""

    mine: bool = False
    done: dict[str, Any] | None = None
    #: The job that did (done) or is doing (held) the effect.
    by_job: int | None = None
    taken_over_from: int | None = None

    @property
    def held(self) -> bool:
        return not self.mine and self.done is None


def _owner(ref: JobRef) -> dict[str, Any]:
    return {"job_id": ref.id, "lease_token": ref.lease_token}


def _is_owner(ref: JobRef) -> sa.ColumnElement[bool]:
    return sa.and_(effects.c.job_id == ref.id, effects.c.lease_token == ref.lease_token)


def reserve_effect(conn: sa.Connection, key: str, ref: JobRef, *, now: datetime) -> Reservation:
    """Claim `key` for the attempt `ref` before doing its effect (see the module)."""
    key = check_effect_key(key)
    for _ in range(3):
        insert = driver(conn).insert
        inserted = conn.execute(
            insert(effects)
            .values(key=key, state=EffectState.RESERVED.value, created_at=now, **_owner(ref))
            .on_conflict_do_nothing(index_elements=[effects.c.key])
            .returning(effects.c.id)
        ).first()
        if inserted is not None:
            return Reservation(mine=True)
        row = conn.execute(
            sa.select(
                effects.c.state, effects.c.job_id, effects.c.lease_token, effects.c.detail
            ).where(effects.c.key == key)
        ).first()
        if row is None:
            continue  # released meanwhile: try to insert again
        if row.state == EffectState.DONE.value:
            return Reservation(done=dict(row.detail or {}), by_job=row.job_id)
        if row.job_id == ref.id and row.lease_token == ref.lease_token:
            return Reservation(mine=True)
        if _still_held(conn, row.job_id, row.lease_token, now):
            return Reservation(by_job=row.job_id)
        # Its attempt lost the job (worker gone, lease expired, job finished): take over.
        taken = conn.execute(
            sa.update(effects)
            .where(
                effects.c.key == key,
                effects.c.state == EffectState.RESERVED.value,
                effects.c.job_id.is_not_distinct_from(row.job_id),
                effects.c.lease_token.is_not_distinct_from(row.lease_token),
            )
            .values(created_at=now, **_owner(ref))
            .returning(effects.c.id)
        ).first()
        if taken is not None:
            return Reservation(mine=True, taken_over_from=row.job_id)
    raise RuntimeError(f"effect key {key!r} kept changing hands")


def _still_held(
    conn: sa.Connection, job_id: int | None, lease_token: int | None, now: datetime
) -> bool:
    if job_id is None or lease_token is None:
        return False
    found = conn.execute(
        sa.select(jobs.c.id).where(
            jobs.c.id == job_id,
            jobs.c.status == JobStatus.RUNNING.value,
            jobs.c.lease_token == lease_token,
            jobs.c.lease_expires_at > now,
        )
    ).first()
    return found is not None


def complete_effect(
    conn: sa.Connection, key: str, ref: JobRef, detail: dict[str, Any] | None = None
) -> bool:
    """Mark the reserved effect done with its detail; False when `ref` no longer owned
    the reservation (another attempt took it over — the effect may now run twice, with
    the same id, which is what the derived ids are for)."""
    done = conn.execute(
        sa.update(effects)
        .where(
            effects.c.key == check_effect_key(key),
            effects.c.state == EffectState.RESERVED.value,
            _is_owner(ref),
        )
        .values(state=EffectState.DONE.value, detail=detail or {})
        .returning(effects.c.id)
    ).first()
    if done is not None:
        return True
    return record_effect(conn, key, job_id=ref.id, detail=detail)


def release_effect(conn: sa.Connection, key: str, ref: JobRef) -> bool:
    """Give up a reservation whose effect certainly did not happen."""
    result = conn.execute(
        sa.delete(effects).where(
            effects.c.key == check_effect_key(key),
            effects.c.state == EffectState.RESERVED.value,
            _is_owner(ref),
        )
    )
    return bool(result.rowcount)


def record_effect(
    conn: sa.Connection, key: str, *, job_id: int | None, detail: dict[str, Any] | None = None
) -> bool:
    """Record an effect as done; False when the key was already recorded (by anyone)."""
    insert = driver(conn).insert
    statement = (
        insert(effects)
        .values(key=check_effect_key(key), job_id=job_id, detail=detail or {})
        .on_conflict_do_nothing(index_elements=[effects.c.key])
        .returning(effects.c.id)
    )
    return conn.execute(statement).first() is not None
