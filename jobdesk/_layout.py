"""Where `jobdesk.shared`, `jobdesk.worker` and `jobdesk.dashboard` live.

The repository keeps the design card's folders at its root (`shared/`, `worker/`,
`dashboard/`, `templates/`, `static/`, `migrations/`); the build maps them under
`jobdesk/` (pyproject.toml, `[tool.hatch.build.targets.wheel.sources]`), so an installed
wheel or sdist has one plain package tree and needs nothing from this module.

A checkout (run from source, or installed in editable mode) has only `jobdesk/` here and
the folders beside it. `install()` then adds one narrow finder for exactly those three
subpackages, loading each from its real folder: the module is `jobdesk.shared.core.claim`
and its file is `<checkout>/shared/core/claim.py`, the path `git log` and `git blame`
know. Nothing else of the checkout (tests, bench) becomes importable, and each module
has one import path: the folders refuse to be imported under their bare names.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

PACKAGE_DIR = Path(__file__).resolve().parent
#: The subpackages kept at the repository root, mapped under `jobdesk` by the build.
ROOT_PACKAGES = ("shared", "worker", "dashboard")


def checkout_root() -> Path | None:
    """The repository root when running from a checkout, else None (an installed package)."""
    if (PACKAGE_DIR / "shared").is_dir():
        return None
    root = PACKAGE_DIR.parent
    if all((root / name / "__init__.py").is_file() for name in ROOT_PACKAGES):
        return root
    return None


class RootFolders(importlib.abc.MetaPathFinder):
    """Finds `jobdesk.<name>` for the root folders of a checkout (see the module)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.names = {f"jobdesk.{name}": root / name for name in ROOT_PACKAGES}

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        folder = self.names.get(fullname)
        if folder is None:
            return None
        return importlib.util.spec_from_file_location(
            fullname, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )


def install() -> None:
    """Make a checkout's root folders importable as `jobdesk.*` (once; no-op if installed)."""
    root = checkout_root()
    if root is None:
        return
    if not any(isinstance(finder, RootFolders) for finder in sys.meta_path):
        sys.meta_path.append(RootFolders(root))
