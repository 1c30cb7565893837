"""Who is asking and what they may do — checked server-side before every view.

Every view declares its minimum role with `@requires("viewer" | "operator" | "admin")`
or `@public`; a view that declares nothing is refused (fail closed). The identity
comes from, in order:

1. a host app's identity loader (when mounted inside another Flask app);
2. the trusted reverse-proxy header (`JOBDESK_TRUSTED_PROXY_HEADER`, e.g.
   `X-Forwarded-User`), only when the TCP peer — the socket address, not anything in
   `X-Forwarded-For` — is one of `JOBDESK_TRUSTED_PROXIES` (see `proxy.py`);
3. the signed session cookie set at login — re-checked against the `operators` table on
   every request, so disabling an account or changing its password ends its sessions.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any, TypeVar

from flask import g, request, session

from jobdesk.dashboard import csrf
from jobdesk.dashboard.proxy import tcp_peer
from jobdesk.dashboard.state import Identity, get_state
from jobdesk.shared.operator.accounts import ROLES, OperatorAccount, get_operator, role_at_least

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
        return None if account.disabled else Identity(account.username, account.role, "proxy")
    role = state.proxy_default_role
    if role in ROLES:
        return Identity(username[:100], role, "proxy")
    return None


def _session_identity(conn: Any) -> Identity | None:
    username = session.get("user")
    if not isinstance(username, str):
        return None
    account = get_operator(conn, username)
    if account is None or account.disabled or session.get("pv") != account.password_version:
        session.clear()
        return None
    return Identity(account.username, account.role, "password")


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
    session["user"] = account.username
    session["pv"] = account.password_version
    session["sid"] = secrets.token_hex(16)
    csrf.rotate()


def end_session() -> None:
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
