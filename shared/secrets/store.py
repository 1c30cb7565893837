"""Job secrets in the database: checking and sealing what an app hands over, storing it
with its job, reading it back for the worker or an admin's reveal, carrying it to a
retry, and sealing everything again with the first key (`jobdesk keys rotate`).

Only sealed values are written or read here; opening one is `keys.Sealer.open`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from jobdesk.shared.core.errors import ValidationError
from jobdesk.shared.secrets.keys import Sealer
from jobdesk.shared.secrets.models import job_secrets

#: A secret's name: what handlers index `ctx.secrets` with and pages show.
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
MAX_SECRETS = 32
MAX_VALUE_BYTES = 16 * 1024

_s = job_secrets.c


def seal_secrets(secrets: Any, sealer_of: Any, field: str = "secrets") -> dict[str, str]:
    """`secrets` checked (a mapping of names to strings) and sealed; `sealer_of()` is
    called only when there is something to seal (an unset key then refuses the
    enqueue). `ValidationError` names the field; nothing is written either way."""
    if not isinstance(secrets, Mapping):
        raise ValidationError(
            field, f"must be a mapping of names to strings, got {type(secrets).__name__}"
        )
    if len(secrets) > MAX_SECRETS:
        raise ValidationError(field, f"at most {MAX_SECRETS} secrets per job, got {len(secrets)}")
    checked: dict[str, str] = {}
    for name, value in secrets.items():
        if not isinstance(name, str) or not NAME.match(name):
            raise ValidationError(
                field, f"{name!r} is not a secret name (letters, digits, _ . -; at most 64)"
            )
        if not isinstance(value, str):
            raise ValidationError(
                f"{field}.{name}", f"must be a string, got {type(value).__name__}"
            )
        if len(value.encode("utf-8")) > MAX_VALUE_BYTES:
            raise ValidationError(f"{field}.{name}", f"longer than {MAX_VALUE_BYTES} bytes")
        checked[name] = value
    if not checked:
        return {}
    try:
        sealer: Sealer = sealer_of()
    except ValueError as exc:
        raise ValidationError(field, str(exc)) from None
    return {name: sealer.seal(value) for name, value in checked.items()}


def store_sealed(conn: sa.Connection, by_job: Mapping[int, Mapping[str, str]]) -> None:
    """Store sealed secrets (job id -> name -> sealed value) in one executemany."""
    rows = [
        {"job_id": job_id, "name": name, "sealed": value}
        for job_id, sealed in by_job.items()
        for name, value in sealed.items()
    ]
    if rows:
        conn.execute(sa.insert(job_secrets), rows)


def secret_names(conn: sa.Connection, job_id: int) -> list[str]:
    """The names of a job's secrets, sorted (what pages may show)."""
    query = sa.select(_s.name).where(_s.job_id == job_id).order_by(_s.name)
    return list(conn.execute(query).scalars())


def sealed_secrets(conn: sa.Connection, job_id: int) -> dict[str, str]:
    query = sa.select(_s.name, _s.sealed).where(_s.job_id == job_id)
    return {row.name: row.sealed for row in conn.execute(query)}


def sealed_secret(conn: sa.Connection, job_id: int, name: str) -> str | None:
    query = sa.select(_s.sealed).where(_s.job_id == job_id, _s.name == name)
    found: str | None = conn.execute(query).scalar()
    return found


def open_secrets(sealed: Mapping[str, str], sealer: Sealer, job_id: int) -> dict[str, str]:
    return {
        name: sealer.open(value, f"secret {name!r} of job {job_id}")
        for name, value in sealed.items()
    }


def copy_secrets(conn: sa.Connection, new_ids: Mapping[int, int]) -> int:
    """Give each retry (`old id -> new id`) the same sealed secrets as the job it
    retries, in one statement; how many rows."""
    if not new_ids:
        return 0
    new_id = sa.case(new_ids, value=_s.job_id)
    copied = sa.select(new_id, _s.name, _s.sealed).where(_s.job_id.in_(list(new_ids)))
    result = conn.execute(sa.insert(job_secrets).from_select(["job_id", "name", "sealed"], copied))
    return int(result.rowcount or 0)


@dataclass(frozen=True, slots=True)
class RotateBatch:
    resealed: int
    #: Where the next batch starts (None: done).
    after: tuple[int, str] | None


def reseal_batch(
    conn: sa.Connection, sealer: Sealer, after: tuple[int, str] | None, limit: int
) -> RotateBatch:
    """Seal up to `limit` secrets past `after` (job id, name) again with the first key.
    Each batch is its own transaction's worth; a rerun from any point is harmless (a
    value sealed with the first key is sealed with it again)."""
    query = sa.select(_s.job_id, _s.name, _s.sealed).order_by(_s.job_id, _s.name).limit(limit)
    if after is not None:
        job_id, name = after
        query = query.where(
            sa.or_(_s.job_id > job_id, sa.and_(_s.job_id == job_id, _s.name > name))
        )
    rows = list(conn.execute(query))
    if rows:
        # One executemany: the driver sends the batch's updates together.
        conn.execute(
            sa.update(job_secrets)
            .where(_s.job_id == sa.bindparam("b_job_id"), _s.name == sa.bindparam("b_name"))
            .values(sealed=sa.bindparam("b_sealed")),
            [
                {
                    "b_job_id": row.job_id,
                    "b_name": row.name,
                    "b_sealed": sealer.reseal(
                        row.sealed, f"secret {row.name!r} of job {row.job_id}"
                    ),
                }
                for row in rows
            ],
        )
    last = (int(rows[-1].job_id), str(rows[-1].name)) if len(rows) == limit else None
    return RotateBatch(len(rows), last)
