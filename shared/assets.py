"""Files Jobdesk ships beside its code: templates, static files, migrations, alembic.ini.

They are looked up inside the `jobdesk` package only (`importlib.resources`), never
beside it: another distribution's `templates/` or `migrations/` in site-packages, or a
folder of the same name in the working directory, is never picked up by mistake.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

__all__ = ["asset_path"]


def asset_path(*parts: str) -> Path:
    """The path of a shipped file or folder, e.g. `asset_path("templates", "email")`."""
    target = files("jobdesk").joinpath(*parts)
    path = Path(str(target))
    if not path.exists():
        shown = "/".join(parts)
        raise FileNotFoundError(f"{shown} is missing from the installed jobdesk package ({path})")
    return path
