"""Who is asking and what they may do — checked server-side before every view.

Every view declares its minimum role with `@requires("viewer" | "operator" | "admin")`
or `@public`; a view that declares nothing is refused (fail closed). The identity
comes from, in order:

1. a host app's identity loader (when mounted inside another Flask app);
2. the trusted reverse-proxy header (`JOBDESK_TRUSTED_PROXY_HEADER`, e.g.
   `X-Forwarded-User`), only when the TCP peer — the socket address, not anything in
   `X-Forwarded-For` — is one of `JOBDESK_TRUSTED_PROXIES` (see `proxy.py`);
3. the signed session cookie set at login — re-checked against the `operators` table on
   every request: an absolute lifetime (`JOBDESK_SESSION_LIFETIME_SECONDS`, 12 h), an
   idle timeout (`JOBDESK_SESSION_IDLE_TIMEOUT_SECONDS`) and the account's session
   generation, which logout, disable, enable and a password change move on — so those
   end every cookie of the account server-side, copies included.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from flask import g, request, session

from jobdesk.dashboard import csrf
from jobdesk.dashboard.proxy import tcp_peer
from jobdesk.dashboard.state import Identity, get_state
from jobdesk.shared.operator.commands.accounts import (
    ROLES,
    OperatorAccount,
    end_sessions,
    get_operator,
    role_at_least,
)

F = TypeVar("F", bound=Callable[..., Any])
ROLE_ATTRIBUTE = "jobdesk_required_role"
PUBLIC = "public"


def requires(role: str) -> Callable[[F], F]:
    """Declare the minimum role for a view."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}")

    def decorate(view: F) -> F:
        setattr(view, ROLE_ATTRIBUTE, role)
        return view

    return decorate


def public(view: F) -> F:
    setattr(view, ROLE_ATTRIBUTE, PUBLIC)
    return view


def required_role(view: Callable[..., Any] | None) -> str | None:
    if view is None:
        return None
    return getattr(view, ROLE_ATTRIBUTE, None)


def _proxy_identity(conn: Any) -> Identity | None:
    state = get_state()
    header = state.settings.trusted_proxy_header
    if not header or not state.trusted_proxies:
        return None
    # The TCP peer, never an address taken from X-Forwarded-For: a client can write
    # anything there, a trusted proxy's own address it cannot fake.
    if not state.trusted_proxies.trusts(tcp_peer(request.environ)):
        return None
    username = (request.headers.get(header) or "").strip()
    if not username:
        return None
    account = get_operator(conn, username)
    if account is not None:
        if account.disabled:
            return None
        return Identity(account.username, account.role, "proxy", account.timezone)
    role = state.proxy_default_role
    if role in ROLES:
        return Identity(username[:100], role, "proxy")
    return None


def wall_clock() -> float:
    """Seconds since the epoch (a seam for tests that need hours to pass)."""
    return time.time()


#: How stale the session's last-seen mark may get before it is rewritten (so not every
#: request re-sends the cookie just to move it by a second) — at most; see
#: `seen_resolution`.
SEEN_RESOLUTION_SECONDS = 60


def seen_resolution(idle_timeout_seconds: float) -> float:
    """How stale the last-seen mark may get: a tenth of the idle timeout, at most
    `SEEN_RESOLUTION_SECONDS`. An active session then always ends at least nine tenths
    of the idle timeout after its last request; a fixed minute would end every session
    of a 60 s idle timeout a minute after login, however busy its user."""
    return min(SEEN_RESOLUTION_SECONDS, idle_timeout_seconds / 10)


def _session_identity(conn: Any) -> Identity | None:
    """The operator of a valid session cookie, else None (and the cookie is emptied).

    Valid means, checked here on every request: the account exists and is enabled, the
    cookie's generation is the account's current one (logout, disable, enable and a
    password change move it on, so copies of an old cookie die too), the password is
    the one it was issued under, it was issued less than the absolute lifetime ago, and
    it was used within the idle timeout.
    """
    username = session.get("user")
    if not isinstance(username, str):
        return None
    settings = get_state().settings
    now = wall_clock()
    issued, seen = session.get("iat"), session.get("seen")
    fresh = (
        isinstance(issued, int | float)
        and isinstance(seen, int | float)
        and now - issued < settings.session_lifetime_seconds
        and now - seen < settings.session_idle_timeout_seconds
    )
    account = get_operator(conn, username) if fresh else None
    if (
        account is None
        or account.disabled
        or session.get("epoch") != account.session_epoch
        or session.get("pv") != account.password_version
    ):
        session.clear()
        return None
    assert isinstance(seen, int | float)
    if now - seen >= seen_resolution(settings.session_idle_timeout_seconds):
        session["seen"] = int(now)
    return Identity(account.username, account.role, "password", account.timezone)


def session_expires_at(data: Mapping[str, Any], lifetime_seconds: float) -> float | None:
    """When the cookie of session `data` must be gone (issue time + absolute lifetime)."""
    issued = data.get("iat")
    return float(issued) + lifetime_seconds if isinstance(issued, int | float) else None


def load_identity(conn: Any) -> Identity | None:
    state = get_state()
    if state.identity_loader is not None:
        return state.identity_loader()
    return _proxy_identity(conn) or _session_identity(conn)


def proxy_configured() -> bool:
    state = get_state()
    return bool(state.settings.trusted_proxy_header and state.trusted_proxies)


def start_session(account: OperatorAccount) -> None:
    """Log in: a brand-new session (new id, new CSRF token) — never reuse the old one."""
    session.clear()
    session.permanent = True
    now = int(wall_clock())
    session["user"] = account.username
    session["pv"] = account.password_version
    session["epoch"] = account.session_epoch
    session["iat"] = now
    session["seen"] = now
    session["sid"] = secrets.token_hex(16)
    csrf.rotate()


def end_session(conn: Any = None) -> None:
    """Log out: with a connection (a write transaction) every cookie issued to this
    operator stops working, not just the one in this browser."""
    identity = current()
    if conn is not None and identity is not None and identity.source == "password":
        end_sessions(conn, identity.username)
    session.clear()


def current() -> Identity | None:
    identity: Identity | None = g.get("identity")
    return identity


def can(role: str) -> bool:
    identity = current()
    return identity is not None and role_at_least(identity.role, role)


def is_viewer_only() -> bool:
    identity = current()
    return identity is None or identity.role == "viewer"


def actor() -> str:
    identity = current()
    assert identity is not None
    return identity.username
