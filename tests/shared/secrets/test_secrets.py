"""Job secrets (`enqueue(..., secrets=…)`): stored only sealed, opened by the worker for
`ctx.secrets`, carried to a triage retry, sealed again by a key rotation, deleted with
their job — and refused, naming the variable, when there is no key."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet

from jobdesk import NewJob, enqueue, enqueue_many
from jobdesk.shared.core.clock import db_now
from jobdesk.shared.core.errors import PermanentError, ValidationError
from jobdesk.shared.core.models import jobs
from jobdesk.shared.operator.commands.triage import retry_dead
from jobdesk.shared.secrets.keys import KeysError, Sealer, parse_keys, sealer_for
from jobdesk.shared.secrets.models import job_secrets
from jobdesk.shared.secrets.store import reseal_batch, secret_names
from jobdesk.shared.settings import Settings, SettingsError
from jobdesk.worker.context import JobContext
from jobdesk.worker.registry import Registry
from jobdesk.worker.registry import job as job_decorator
from jobdesk.worker.testing import drain

OLD_KEY = Fernet.generate_key().decode()
NEW_KEY = Fernet.generate_key().decode()
TOKEN = "ya29.refresh-token-of-ana"


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("JOBDESK_ENCRYPTION_KEYS", OLD_KEY)
    return OLD_KEY


def sealed_rows(engine: sa.Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(job_secrets).order_by(job_secrets.c.job_id)))


def count_jobs(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar_one())


def crm_registry(seen: list[dict[str, str]], *, fail: bool = False) -> Registry:
    reg = Registry()

    @job_decorator("crm.sync", target=reg, max_attempts=1)
    def sync(payload: dict[str, Any], ctx: JobContext) -> None:
        seen.append(dict(ctx.secrets))
        if fail:
            raise PermanentError("the CRM said 401")

    return reg


def test_a_secret_is_stored_sealed_and_the_handler_reads_it(engine: sa.Engine, keys: str) -> None:
    with engine.begin() as conn:
        job_id = enqueue(conn, "crm.sync", {"account": 42}, secrets={"refresh_token": TOKEN})
    (row,) = sealed_rows(engine)
    assert (row.job_id, row.name) == (job_id, "refresh_token")
    assert TOKEN not in row.sealed
    assert Sealer(parse_keys(keys)).open(row.sealed, "test") == TOKEN
    with engine.connect() as conn:
        stored = conn.execute(sa.select(jobs.c.payload).where(jobs.c.id == job_id)).scalar_one()
        assert TOKEN not in str(stored)
        assert secret_names(conn, job_id) == ["refresh_token"]

    seen: list[dict[str, str]] = []
    settings = Settings.from_env()
    assert drain(engine, registry=crm_registry(seen), settings=settings).by_kind == {"succeeded": 1}
    assert seen == [{"refresh_token": TOKEN}]


def test_without_a_key_the_enqueue_is_refused_and_nothing_is_written(
    engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JOBDESK_ENCRYPTION_KEYS", raising=False)
    refusal = pytest.raises(ValidationError, match="JOBDESK_ENCRYPTION_KEYS is not set")
    with refusal as refused, engine.begin() as conn:
        enqueue(conn, "crm.sync", {}, secrets={"refresh_token": TOKEN})
    assert refused.value.field == "secrets"
    second = pytest.raises(ValidationError, match=r"jobs\[1\]\.secrets: JOBDESK_ENCRYPTION_KEYS")
    with second, engine.begin() as conn:
        enqueue_many(conn, [NewJob("crm.sync", {}), NewJob("crm.sync", {}, secrets={"a": "b"})])
    assert count_jobs(engine) == 0
    assert sealed_rows(engine) == []
    # No secrets, no key needed.
    with engine.begin() as conn:
        enqueue(conn, "crm.sync", {}, secrets={})


@pytest.mark.parametrize(
    ("secrets", "message"),
    [
        ({"bad name!": "x"}, "is not a secret name"),
        ({"token": 42}, "secrets.token: must be a string"),
        (["token"], "must be a mapping of names to strings"),
        ({"token": "x" * 20_000}, "secrets.token: longer than 16384 bytes"),
    ],
)
def test_bad_secrets_are_refused_by_name(
    engine: sa.Engine, keys: str, secrets: Any, message: str
) -> None:
    with pytest.raises(ValidationError, match=message), engine.begin() as conn:
        enqueue(conn, "crm.sync", {}, secrets=secrets)
    assert count_jobs(engine) == 0


def test_malformed_keys_are_named_by_position_never_echoed() -> None:
    with pytest.raises(SettingsError) as bad:
        Settings.from_env({"JOBDESK_ENCRYPTION_KEYS": f"{OLD_KEY}, not-a-key-at-all"})
    assert "JOBDESK_ENCRYPTION_KEYS: key 2 of 2 is not a Fernet key" in str(bad.value)
    assert "not-a-key-at-all" not in str(bad.value)
    assert OLD_KEY not in str(bad.value)
    with pytest.raises(KeysError, match="is not set"):
        sealer_for(None)


def test_a_repeated_key_keeps_the_first_jobs_secrets(engine: sa.Engine, keys: str) -> None:
    with engine.begin() as conn:
        first = enqueue(conn, "crm.sync", {}, idempotency_key="k", secrets={"t": "first"})
        again = enqueue(conn, "crm.sync", {}, idempotency_key="k", secrets={"t": "second"})
        ids = enqueue_many(
            conn,
            [
                NewJob("crm.sync", {}, idempotency_key="m", secrets={"t": "one"}),
                NewJob("crm.sync", {}, idempotency_key="m", secrets={"t": "two"}),
                NewJob("crm.sync", {}, secrets={"t": "three"}),
            ],
        )
    assert first == again
    assert ids[0] == ids[1]
    sealer = sealer_for(keys)
    opened = {(row.job_id, sealer.open(row.sealed, "t")) for row in sealed_rows(engine)}
    assert opened == {(first, "first"), (ids[0], "one"), (ids[2], "three")}


def test_a_triage_retry_carries_the_secrets_sealed(engine: sa.Engine, keys: str) -> None:
    seen: list[dict[str, str]] = []
    with engine.begin() as conn:
        dead = enqueue(conn, "crm.sync", {}, secrets={"refresh_token": TOKEN})
    drain(engine, registry=crm_registry(seen, fail=True), settings=Settings.from_env())
    with engine.begin() as conn:
        retry = retry_dead(conn, dead, actor="ana", reason="CRM fixed", now=db_now(conn))
    drain(engine, registry=crm_registry(seen), settings=Settings.from_env())
    assert seen == [{"refresh_token": TOKEN}, {"refresh_token": TOKEN}]
    rows = sealed_rows(engine)
    assert [row.job_id for row in rows] == [dead, retry]
    assert rows[0].sealed == rows[1].sealed, "copied as sealed, not opened"


def test_rotation_seals_everything_with_the_first_key_in_resumable_batches(
    engine: sa.Engine, keys: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with engine.begin() as conn:
        for n in range(5):
            enqueue(conn, "crm.sync", {"n": n}, secrets={"a": f"a{n}", "b": f"b{n}"})
    both = sealer_for(f"{NEW_KEY},{OLD_KEY}")
    after = None
    batches = 0
    while True:
        with engine.begin() as conn:
            batch = reseal_batch(conn, both, after, limit=4)
        batches += 1
        if batch.after is None:
            break
        after = batch.after
    assert batches == 3  # 10 secrets, 4 per batch
    only_new = sealer_for(NEW_KEY)
    values = sorted(only_new.open(row.sealed, "x") for row in sealed_rows(engine))
    assert values == sorted([f"a{n}" for n in range(5)] + [f"b{n}" for n in range(5)])
    with pytest.raises(KeysError, match="cannot be opened with any key"):
        sealer_for(OLD_KEY).open(sealed_rows(engine)[0].sealed, "secret 'a' of job 1")


def test_a_worker_without_the_key_fails_the_attempt_naming_the_variable(
    engine: sa.Engine, keys: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with engine.begin() as conn:
        job_id = enqueue(conn, "crm.sync", {}, secrets={"refresh_token": TOKEN})
    monkeypatch.delenv("JOBDESK_ENCRYPTION_KEYS")
    seen: list[dict[str, str]] = []
    drain(engine, registry=crm_registry(seen), settings=Settings.from_env())
    assert seen == []
    with engine.connect() as conn:
        row = conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).one()
    assert row.status == "dead"
    assert "JOBDESK_ENCRYPTION_KEYS is not set" in row.last_error
    assert TOKEN not in row.last_error


def test_secrets_go_with_their_job(engine: sa.Engine, keys: str) -> None:
    with engine.begin() as conn:
        job_id = enqueue(conn, "crm.sync", {}, secrets={"t": TOKEN})
    from jobdesk.shared.retention.pruning import prune_jobs_batch

    del prune_jobs_batch  # retention deletes job rows; the foreign key takes the secrets
    with engine.begin() as conn:
        conn.execute(sa.delete(jobs).where(jobs.c.id == job_id))
    assert sealed_rows(engine) == []
