"""Cross-site request forgery protection for every unsafe request.

Two independent checks, both must pass:

1. a per-session random token, sent as the `csrf_token` form field (plain forms) or the
   `X-CSRF-Token` header (htmx reads it from a `<meta>` tag via static/dashboard.js);
2. the browser's own provenance headers: a present `Origin` must be this origin —
   scheme, host and port — and a present `Sec-Fetch-Site` must be `same-origin` (or
   `none`: typed by the user).
"""

from __future__ import annotations

import hmac
import secrets
from urllib.parse import urlsplit

from flask import request, session

SESSION_KEY = "csrf"
FORM_FIELD = "csrf_token"
HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def token() -> str:
    """This session's token (created on first use)."""
    value = session.get(SESSION_KEY)
    if not isinstance(value, str):
        value = secrets.token_urlsafe(32)
        session[SESSION_KEY] = value
    return value


def rotate() -> str:
    session[SESSION_KEY] = secrets.token_urlsafe(32)
    return str(session[SESSION_KEY])


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _parts(url: str) -> tuple[str, str, int | None] | None:
    try:
        split = urlsplit(url)
        port = split.port
    except ValueError:
        return None
    scheme = split.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not split.hostname:
        return None
    return scheme, split.hostname.lower(), port or _DEFAULT_PORTS[scheme]


def _origin(scheme: str, host: str) -> str:
    return f"{scheme}://{host}"


def same_origin(origin: str) -> bool:
    """Scheme, host and port of `origin` are this request's (`http://x` posting to
    `https://x` is another origin: a network attacker's plain-HTTP page)."""
    mine = _parts(_origin(request.scheme, request.host))
    theirs = None if origin == "null" else _parts(origin)
    return theirs is not None and theirs == mine


def problem() -> str | None:
    """Why the current unsafe request is refused, or None when it passes."""
    if request.method in SAFE_METHODS:
        return None
    origin = request.headers.get("Origin")
    if origin is not None and not same_origin(origin):
        return (
            f"the request came from another site (Origin {origin[:80]} is not "
            f"{_origin(request.scheme, request.host)}; behind a TLS proxy, list it in "
            "JOBDESK_TRUSTED_PROXIES)"
        )
    fetch_site = request.headers.get("Sec-Fetch-Site")
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return f"the request came from another site (Sec-Fetch-Site: {fetch_site[:20]})"
    expected = session.get(SESSION_KEY)
    sent = request.headers.get(HEADER) or request.form.get(FORM_FIELD)
    if not isinstance(expected, str) or not sent:
        return "the form's security token is missing; reload the page and try again"
    if not hmac.compare_digest(expected.encode(), sent.encode()):
        return "the form's security token does not match; reload the page and try again"
    return None
