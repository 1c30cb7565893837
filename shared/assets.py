"""Files Jobdesk ships beside its code: templates, static files, the migrations.

They sit next to the `shared` package itself: in an installed wheel or sdist that is the
`jobdesk/` package directory (the build maps the repository's root folders under it), in
a checkout the repository root — the same relative place either way. They are never
looked up anywhere else: another distribution's `templates/` or `migrations/` in
site-packages, or a folder of the same name in the working directory, is never picked up.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["asset_path"]

#: `jobdesk/` when installed, the repository root in a checkout (see the module).
_BASE = Path(__file__).resolve().parent.parent


def asset_path(*parts: str) -> Path:
    """The path of a shipped file or folder, e.g. `asset_path("templates", "email")`."""
    path = _BASE.joinpath(*parts)
    if not path.exists():
        shown = "/".join(parts)
        raise FileNotFoundError(f"{shown} is missing from the installed jobdesk package ({path})")
    return path
