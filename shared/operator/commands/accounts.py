"""Dashboard accounts: operators with a hashed password and a role.

Roles are ordered: `viewer` reads (payload fields and emails masked), `operator` also
triages dead letters and acknowledges alerts, `admin` also pauses endpoints, closes
circuit breakers and manages these accounts. Passwords are hashed with Werkzeug's
scrypt-based hasher and never stored or logged in clear; what a password may be is
`operator.passwords`. `verify` spends the same hashing time for unknown users so
response times do not reveal which usernames exist.

Usernames are case-insensitive: `Ana` names the account `ana` (login, lookups, the
proxy's SSO header), a second account differing only by case is refused, and a unique
index on `lower(username)` holds it in the database. The account keeps the spelling it
was created with.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from werkzeug.security import check_password_hash, generate_password_hash

from jobdesk.shared.core import audit
from jobdesk.shared.core.audit import AuditAction
from jobdesk.shared.core.errors import ConflictError, NotFoundError, ValidationError
from jobdesk.shared.core.models import NAME_LENGTH
from jobdesk.shared.operator.models import Role, operators
from jobdesk.shared.operator.passwords import PASSWORD_MAX_CHARS, check_password
from jobdesk.shared.operator.zones import check_timezone

ROLES: tuple[str, ...] = tuple(Role)
#: ASCII only, so lower() means the same in Python, PostgreSQL and SQLite.
USERNAME_PATTERN = re.compile(rf"[A-Za-z0-9._@-]{{1,{NAME_LENGTH}}}")


class LastAdminError(ConflictError):
    """The change would leave no enabled admin to manage the accounts."""


class UsernameTakenError(ConflictError):
    """An account of that name exists: `existing`, as it is spelled (usernames are
    case-insensitive, so it may differ from the name asked for by case)."""

    def __init__(self, message: str, existing: str) -> None:
        super().__init__(message)
        self.existing = existing


#: werkzeug's hash method for new passwords: scrypt at werkzeug's cost (about 0.1 s of
#: CPU per hash or check here). The test suite lowers it for the accounts it makes by
#: the thousand; production code never changes it.
PASSWORD_HASH_METHOD = "scrypt"  # noqa: S105 (a method name, not a password)
_dummy_hashes: dict[str, str] = {}


def hash_password(password: str) -> str:
    return generate_password_hash(password, method=PASSWORD_HASH_METHOD)


def _dummy_hash() -> str:
    """A hash to check a wrong password against when the account does not exist, so
    the answer takes as long as for a real one (made once per method)."""
    found = _dummy_hashes.get(PASSWORD_HASH_METHOD)
    if found is None:
        found = _dummy_hashes[PASSWORD_HASH_METHOD] = hash_password("jobdesk-timing-equaliser")
    return found


@dataclass(frozen=True, slots=True)
class OperatorAccount:
    id: int
    username: str
    role: str
    disabled: bool
    created_at: datetime
    last_login_at: datetime | None
    #: A short digest of the password hash: sessions remember it, so changing the
    #: password signs out every other session.
    password_version: str
    #: The session generation; sessions issued under an older one are refused.
    session_epoch: int = 0
    #: The IANA zone the account reads times in (None: the browser's, else UTC).
    timezone: str | None = None


def role_at_least(role: str, needed: str) -> bool:
    return ROLES.index(role) >= ROLES.index(needed)


def check_username(username: object) -> str:
    if not isinstance(username, str) or not USERNAME_PATTERN.fullmatch(username):
        raise ValidationError(
            "username", f"use 1-{NAME_LENGTH} characters from letters, digits and . _ @ -"
        )
    return username


def check_role(role: object) -> str:
    if role not in ROLES:
        raise ValidationError("role", f"must be one of {', '.join(ROLES)}")
    return str(role)


def _named(username: str) -> sa.ColumnElement[bool]:
    """The account called `username`, whatever the case (the `lower(username)` index)."""
    return sa.func.lower(operators.c.username) == username.lower()


def _account(row: Any) -> OperatorAccount:
    return OperatorAccount(
        id=row.id,
        username=row.username,
        role=row.role,
        disabled=bool(row.disabled),
        created_at=row.created_at,
        last_login_at=row.last_login_at,
        password_version=password_version(row.password_hash),
        session_epoch=int(row.session_epoch),
        timezone=row.timezone,
    )


def password_version(password_hash: str) -> str:
    return hashlib.sha256(password_hash.encode()).hexdigest()[:16]


def add_operator(
    conn: sa.Connection,
    username: str,
    password: str,
    role: str,
    *,
    now: datetime,
    actor: str = "cli",
) -> OperatorAccount:
    """Create an account; refuses a username that exists (also a disabled one), in any
    capitalisation."""
    username = check_username(username)
    role = check_role(role)
    password = check_password(password, username=username)
    exists = conn.execute(sa.select(operators.c.username).where(_named(username))).first()
    if exists is not None:
        if exists.username == username:
            raise UsernameTakenError(f"operator {username!r} already exists", username)
        raise UsernameTakenError(
            f"operator {exists.username!r} already exists and usernames are case-insensitive: "
            f"{username!r} would be the same name",
            exists.username,
        )
    conn.execute(
        sa.insert(operators).values(
            username=username,
            password_hash=hash_password(password),
            role=role,
            created_at=now,
        )
    )
    audit.record(
        conn, actor=actor, action=AuditAction.OPERATOR_ADD, subject=f"operator:{username}",
        details={"role": role}, now=now,
    )  # fmt: skip
    return require_operator(conn, username)


def get_operator(conn: sa.Connection, username: str) -> OperatorAccount | None:
    """The account called `username` in any capitalisation, or None. A name outside the
    username pattern names no account (`K` + Kelvin sign lower-cases to `k` in Python)."""
    if not isinstance(username, str) or not USERNAME_PATTERN.fullmatch(username):
        return None
    row = conn.execute(sa.select(operators).where(_named(username))).one_or_none()
    return _account(row) if row is not None else None


def require_operator(conn: sa.Connection, username: str) -> OperatorAccount:
    account = get_operator(conn, username)
    if account is None:
        raise NotFoundError(f"no operator named {username!r}")
    return account


def list_operators(conn: sa.Connection) -> list[OperatorAccount]:
    return [_account(r) for r in conn.execute(sa.select(operators).order_by(operators.c.username))]


def any_operator_exists(conn: sa.Connection) -> bool:
    """True once at least one enabled account exists (the dashboard opens then)."""
    query = sa.select(operators.c.id).where(operators.c.disabled.is_(sa.false())).limit(1)
    return conn.execute(query).first() is not None


def check_credentials(conn: sa.Connection, username: str, password: str) -> OperatorAccount | None:
    """The account when the password matches and the account is enabled, else None.

    Writes nothing; spends the same hashing time for unknown users."""
    row = None
    if isinstance(username, str) and USERNAME_PATTERN.fullmatch(username):
        row = conn.execute(sa.select(operators).where(_named(username))).one_or_none()
    if row is None or len(password) > PASSWORD_MAX_CHARS:
        check_password_hash(_dummy_hash(), password[:PASSWORD_MAX_CHARS])
        return None
    if not check_password_hash(row.password_hash, password) or row.disabled:
        return None
    return _account(row)


def record_login(conn: sa.Connection, account: OperatorAccount, *, now: datetime) -> None:
    conn.execute(sa.update(operators).where(operators.c.id == account.id).values(last_login_at=now))


def verify(
    conn: sa.Connection, username: str, password: str, *, now: datetime
) -> OperatorAccount | None:
    """`check_credentials`, recording the login time on success (the caller commits)."""
    account = check_credentials(conn, username, password)
    if account is not None:
        record_login(conn, account, now=now)
    return account


def _next_epoch() -> sa.ColumnElement[int]:
    return operators.c.session_epoch + 1


def end_sessions(conn: sa.Connection, username: str) -> bool:
    """Invalidate every session cookie issued to `username` (logout ends them all, on
    every device: a copied cookie dies with the one logged out). True when it exists."""
    if not USERNAME_PATTERN.fullmatch(username):
        return False
    result = conn.execute(
        sa.update(operators).where(_named(username)).values(session_epoch=_next_epoch())
    )
    return bool(result.rowcount)


def check_an_admin_remains(conn: sa.Connection, username: str) -> None:
    """Refuse (LastAdminError) a change that takes `username` out of the enabled admins
    when no other enabled admin would be left to manage the accounts.

    The enabled admins' rows are locked (PostgreSQL) so two admins demoting each other
    at the same moment cannot both succeed; SQLite writers are serialised anyway."""
    admins = conn.execute(
        sa.select(operators.c.username)
        .where(operators.c.role == Role.ADMIN.value, operators.c.disabled.is_(sa.false()))
        .with_for_update()
    ).scalars()
    if not {admin.lower() for admin in admins} - {username.lower()}:
        raise LastAdminError(
            f"{username} is the only enabled admin; make another account admin first, "
            "or nobody could manage the accounts from the dashboard"
        )


def set_role(
    conn: sa.Connection,
    username: str,
    role: str,
    *,
    now: datetime,
    actor: str = "cli",
    keep_an_admin: bool = False,
) -> OperatorAccount:
    """Give an account another role (audited with the old and the new one).

    Sessions continue: the role is read from the table on every request, so the new
    one applies from the account's next click. With `keep_an_admin` the last enabled
    admin cannot be demoted (the dashboard's rule; the CLI stays the way back in)."""
    role = check_role(role)
    account = require_operator(conn, username)
    if account.role == role:
        return account
    if keep_an_admin and account.role == Role.ADMIN and not account.disabled:
        check_an_admin_remains(conn, account.username)
    conn.execute(sa.update(operators).where(operators.c.id == account.id).values(role=role))
    audit.record(
        conn, actor=actor, action=AuditAction.OPERATOR_ROLE,
        subject=f"operator:{account.username}",
        details={"from": account.role, "to": role}, now=now,
    )  # fmt: skip
    return require_operator(conn, account.username)


def set_disabled(
    conn: sa.Connection,
    username: str,
    disabled: bool,
    *,
    now: datetime,
    actor: str = "cli",
    keep_an_admin: bool = False,
) -> OperatorAccount:
    """Disable or re-enable an account; either way every existing session ends (a
    re-enabled account starts from a fresh login, old cookies stay dead). With
    `keep_an_admin` the last enabled admin cannot be disabled."""
    account = require_operator(conn, username)
    if keep_an_admin and disabled and account.role == Role.ADMIN and not account.disabled:
        check_an_admin_remains(conn, account.username)
    conn.execute(
        sa.update(operators)
        .where(operators.c.id == account.id)
        .values(disabled=disabled, session_epoch=_next_epoch())
    )
    audit.record(
        conn,
        actor=actor,
        action=AuditAction.OPERATOR_DISABLE if disabled else AuditAction.OPERATOR_ENABLE,
        subject=f"operator:{account.username}",
        now=now,
    )
    return require_operator(conn, account.username)


def set_password(
    conn: sa.Connection, username: str, password: str, *, now: datetime, actor: str = "cli"
) -> OperatorAccount:
    """Change a password; every existing session of the account ends."""
    account = require_operator(conn, username)
    password = check_password(password, username=account.username)
    conn.execute(
        sa.update(operators)
        .where(operators.c.id == account.id)
        .values(password_hash=hash_password(password), session_epoch=_next_epoch())
    )
    audit.record(
        conn,
        actor=actor,
        action=AuditAction.OPERATOR_PASSWORD,
        subject=f"operator:{account.username}",
        now=now,
    )
    return require_operator(conn, account.username)


def set_timezone(conn: sa.Connection, username: str, zone: str | None) -> OperatorAccount:
    """Set (a known IANA name) or clear (None: the browser's zone applies) the zone an
    account reads the dashboard's times in. A display preference of the account's own,
    like the refresh interval: it changes no access and no data, so it is not audited,
    and sessions continue."""
    account = require_operator(conn, username)
    value = None if zone is None else check_timezone(zone)
    conn.execute(sa.update(operators).where(operators.c.id == account.id).values(timezone=value))
    return require_operator(conn, account.username)
