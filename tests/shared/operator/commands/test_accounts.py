"""Account changes: a role change is audited; with `keep_an_admin` (the dashboard's rule)
the last enabled admin is neither demoted nor disabled, even by two admins racing; an
account keeps the time zone it reads the dashboard in."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.core.errors import NotFoundError, ValidationError
from jobdesk.shared.operator.commands.accounts import (
    LastAdminError,
    UsernameTakenError,
    add_operator,
    end_sessions,
    get_operator,
    require_operator,
    set_disabled,
    set_password,
    set_role,
    set_timezone,
    verify,
)

NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)
PASSWORD = "a long enough password"


def _admins(engine: sa.Engine, *names: str) -> None:
    with engine.begin() as conn:
        for name in names:
            add_operator(conn, name, PASSWORD, "admin", now=NOW)


def test_keep_an_admin_refuses_the_last_one_and_the_cli_default_does_not(
    engine: sa.Engine,
) -> None:
    _admins(engine, "ana")
    with engine.begin() as conn:
        with pytest.raises(LastAdminError, match="ana is the only enabled admin"):
            set_role(conn, "ana", "viewer", now=NOW, keep_an_admin=True)
        with pytest.raises(LastAdminError):
            set_disabled(conn, "ana", True, now=NOW, keep_an_admin=True)
        assert require_operator(conn, "ana").role == "admin"
    with engine.begin() as conn:
        # The CLI is the way back in, so it keeps its old freedom.
        account = set_role(conn, "ana", "operator", now=NOW, actor="cli:root")
        assert account.role == "operator"
        entry = conn.execute(
            sa.select(audit_log.c.actor, audit_log.c.details).where(
                audit_log.c.action == "operator.role"
            )
        ).one()
        assert tuple(entry) == ("cli:root", {"from": "admin", "to": "operator"})


@pytest.mark.postgresql_only
def test_two_admins_demoting_each_other_at_once_leave_one_admin(engine: sa.Engine) -> None:
    _admins(engine, "ana", "bo")
    outcome: list[BaseException | None] = []
    first = engine.connect()
    first.begin()
    set_role(first, "ana", "operator", now=NOW, keep_an_admin=True)  # holds the admins' rows

    def demote_bo() -> None:
        try:
            with engine.begin() as conn:
                set_role(conn, "bo", "operator", now=NOW, keep_an_admin=True)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    racer = threading.Thread(target=demote_bo)
    racer.start()
    racer.join(timeout=1.0)
    assert racer.is_alive(), "the second demotion must wait for the first"
    first.commit()
    first.close()
    racer.join(timeout=10)
    assert len(outcome) == 1
    assert isinstance(outcome[0], LastAdminError)
    with engine.connect() as conn:
        assert require_operator(conn, "bo").role == "admin"
        assert require_operator(conn, "ana").role == "operator"


def test_an_account_keeps_the_zone_it_reads_times_in_until_cleared(engine: sa.Engine) -> None:
    _admins(engine, "ana")
    with engine.begin() as conn:
        assert require_operator(conn, "ana").timezone is None
        epoch = require_operator(conn, "ana").session_epoch
        assert set_timezone(conn, "ana", " Asia/Tokyo ").timezone == "Asia/Tokyo"
    with engine.connect() as conn:
        account = require_operator(conn, "ana")
        # A display preference: sessions continue, nothing is audited.
        assert (account.timezone, account.session_epoch) == ("Asia/Tokyo", epoch)
        assert conn.execute(sa.select(sa.func.count()).select_from(audit_log)).scalar_one() == 1
    with engine.begin() as conn:
        with pytest.raises(ValidationError, match="not a time zone this server knows"):
            set_timezone(conn, "ana", "Asia/Atlantis")
        assert require_operator(conn, "ana").timezone == "Asia/Tokyo"
        assert set_timezone(conn, "ana", None).timezone is None
        with pytest.raises(NotFoundError):
            set_timezone(conn, "nobody", "UTC")


def test_usernames_are_case_insensitive(engine: sa.Engine) -> None:
    _admins(engine, "ana")
    with engine.begin() as conn:
        with pytest.raises(UsernameTakenError, match="case-insensitive") as caught:
            add_operator(conn, "Ana", PASSWORD, "viewer", now=NOW)
        assert caught.value.existing == "ana"
        with pytest.raises(UsernameTakenError, match="'ana' already exists"):
            add_operator(conn, "ana", PASSWORD, "viewer", now=NOW)
    with engine.begin() as conn:
        # Every lookup finds the one account, which keeps the spelling it was made with.
        account = verify(conn, "ANA", PASSWORD, now=NOW)
        assert account is not None
        assert account.username == "ana"
        assert require_operator(conn, "aNa").username == "ana"
        assert set_role(conn, "Ana", "operator", now=NOW).role == "operator"
        assert end_sessions(conn, "ANA")
        subjects = conn.execute(
            sa.select(audit_log.c.subject).where(audit_log.c.action == "operator.role")
        ).scalars()
        assert list(subjects) == ["operator:ana"]
        # A name outside the username pattern names nobody, even if Python lower-cases
        # it to one (the Kelvin sign K becomes k).
        add_operator(conn, "kate", PASSWORD, "viewer", now=NOW)
        assert get_operator(conn, "\u212aate") is None
        assert verify(conn, "\u212aate", PASSWORD, now=NOW) is None


def test_a_password_may_not_contain_the_accounts_name(engine: sa.Engine) -> None:
    _admins(engine, "otto")
    with engine.begin() as conn:
        with pytest.raises(ValidationError, match="username"):
            add_operator(conn, "nina", "Nina's long password", "viewer", now=NOW)
        with pytest.raises(ValidationError, match="username"):
            set_password(conn, "OTTO", "otto and a long tail", now=NOW)
        with pytest.raises(ValidationError, match="most common"):
            set_password(conn, "otto", "Password123", now=NOW)


def test_production_passwords_are_hashed_with_scrypt_at_werkzeugs_cost() -> None:
    from werkzeug.security import check_password_hash

    from jobdesk.shared.operator.commands import accounts

    cheap = accounts.PASSWORD_HASH_METHOD
    accounts.PASSWORD_HASH_METHOD = "scrypt"  # what a real process uses
    try:
        hashed = accounts.hash_password("a long enough passphrase")
    finally:
        accounts.PASSWORD_HASH_METHOD = cheap
    assert hashed.startswith("scrypt:32768:8:1$")
    assert check_password_hash(hashed, "a long enough passphrase")
    assert cheap != "scrypt"  # the suite's own accounts are cheap


def test_the_production_default_is_scrypt() -> None:
    import subprocess
    import sys

    code = (
        "from jobdesk.shared.operator.commands import accounts; "
        "print(accounts.PASSWORD_HASH_METHOD)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "scrypt"
