"""Where to send the operator next: safe `next=` targets and the 303 after an action.

A target is accepted only when it is a path on this dashboard: it starts with a single
`/` (no `//host`, no backslash tricks, no scheme), carries no control characters, and
lies under the dashboard's mount point. Anything else falls back to a known page.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from flask import redirect, request
from werkzeug.wrappers import Response

MAX_TARGET_CHARS = 2000


def safe_target(candidate: object, default: str) -> str:
    if not isinstance(candidate, str) or not candidate or len(candidate) > MAX_TARGET_CHARS:
        return default
    if not candidate.startswith("/") or candidate.startswith("//") or "\\" in candidate:
        return default
    if any(ord(char) < 32 or ord(char) == 127 for char in candidate):
        return default
    parts = urlsplit(candidate)
    if parts.scheme or parts.netloc:
        return default
    root = request.script_root.rstrip("/")
    if root and not (candidate == root or candidate.startswith(root + "/")):
        return default
    return candidate


def back(default: str) -> Response:
    """303 to the form's `next` (the page the operator acted from), filters included."""
    target = safe_target(request.form.get("next") or request.args.get("next"), default)
    return redirect(target, code=303)


def here() -> str:
    """The current page as a `next` value (path and query string)."""
    path = request.full_path
    return path[:-1] if path.endswith("?") else path
