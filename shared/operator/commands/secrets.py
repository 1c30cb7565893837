"""An admin reveals one secret of a job: the value is opened and an audit row records
who, when, which job and which secret — in one transaction, so no reveal goes
unrecorded."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from jobdesk.shared.core import audit
from jobdesk.shared.core.audit import AuditAction
from jobdesk.shared.core.errors import NotFoundError
from jobdesk.shared.core.validation import check_reason
from jobdesk.shared.secrets.keys import Sealer
from jobdesk.shared.secrets.store import sealed_secret


def reveal_secret(
    conn: sa.Connection,
    job_id: int,
    name: str,
    *,
    sealer: Sealer,
    actor: str,
    reason: str | None,
    now: datetime,
) -> str:
    """The opened value of secret `name` of job `job_id`, audited (`secret.reveal`).
    `NotFoundError` when the job has no such secret; `KeysError` (nothing audited) when
    no configured key opens it."""
    clean = check_reason(reason, required=False)
    sealed = sealed_secret(conn, job_id, name)
    if sealed is None:
        raise NotFoundError(f"job {job_id} has no secret {name!r}")
    value = sealer.open(sealed, f"secret {name!r} of job {job_id}")
    audit.record(
        conn,
        actor=actor,
        action=AuditAction.SECRET_REVEAL,
        job_id=job_id,
        subject=f"secret {name}",  # not "secret:…": that reads as a secret value, masked
        reason=clean,
        now=now,
    )
    return value
