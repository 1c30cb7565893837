"""`jobdesk keys generate|rotate`: a new key, and every stored secret sealed again with
the first key; an unset or wrong key list is one line, and a rerun is harmless."""

from __future__ import annotations

import os

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from cryptography.fernet import Fernet

from jobdesk import enqueue
from jobdesk.cli import cli
from jobdesk.shared.secrets.keys import sealer_for
from jobdesk.shared.secrets.models import job_secrets

OLD, NEW = Fernet.generate_key().decode(), Fernet.generate_key().decode()


def run(db_url: str, *args: str, keys: str | None) -> tuple[int, str]:
    env: dict[str, str | None] = {
        k: v for k, v in os.environ.items() if not k.startswith("JOBDESK_")
    }
    env["JOBDESK_ENCRYPTION_KEYS"] = keys
    result = CliRunner().invoke(cli, ["--database-url", db_url, "keys", *args], env=env)
    return result.exit_code, result.output


def test_generate_prints_a_fernet_key(db_url: str) -> None:
    code, out = run(db_url, "generate", keys=None)
    assert code == 0
    Fernet(out.strip().encode())


def test_rotate_seals_every_secret_with_the_first_key(
    engine: sa.Engine, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBDESK_ENCRYPTION_KEYS", OLD)
    with engine.begin() as conn:
        for n in range(7):
            enqueue(conn, "crm.sync", {"n": n}, secrets={"token": f"t{n}"})

    code, out = run(db_url, "rotate", keys=None)
    assert code == 1
    assert "JOBDESK_ENCRYPTION_KEYS is not set" in out
    assert "Traceback" not in out
    code, out = run(db_url, "rotate", keys=NEW)  # the old key is missing from the list
    assert code == 1
    assert "cannot be opened with any key of JOBDESK_ENCRYPTION_KEYS" in out
    assert "sealed again before this" not in out  # nothing was: nothing to say

    code, out = run(db_url, "rotate", "--batch", "3", keys=f"{NEW},{OLD}")
    assert code == 0, out
    assert out.strip().splitlines()[-1] == "7 secrets sealed with the first key"
    with engine.connect() as conn:
        sealed = list(conn.execute(sa.select(job_secrets.c.sealed)).scalars())
    only_new = sealer_for(NEW)
    assert sorted(only_new.open(value, "t") for value in sealed) == [f"t{n}" for n in range(7)]
    code, out = run(db_url, "rotate", keys=f"{NEW},{OLD}")  # again: harmless
    assert code == 0
