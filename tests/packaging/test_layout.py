"""The checkout's layout: real folders at the root, one import path per module.

The root folders are `jobdesk.shared`, `jobdesk.worker` and `jobdesk.dashboard` through
`jobdesk/_layout.py`; the repository holds no symlink, so a clone made without symlink
support (Windows, `core.symlinks=false`) is the same checkout; and importing a folder
under its bare name is refused instead of loading a second copy of every module.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import jobdesk.dashboard
import jobdesk.shared.core.errors
import jobdesk.worker

ROOT = Path(__file__).resolve().parents[2]


def _git(*args: str, cwd: Path = ROOT) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=120
    )
    return done.stdout


def _python(
    code: str, *, cwd: Path, pythonpath: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_repository_holds_no_symlinks() -> None:
    links = [line for line in _git("ls-files", "-s").splitlines() if line.startswith("120000")]
    assert links == []


def test_the_root_folders_are_the_jobdesk_subpackages_of_this_checkout() -> None:
    assert Path(jobdesk.shared.core.errors.__file__) == ROOT / "shared" / "core" / "errors.py"
    assert Path(jobdesk.worker.__file__) == ROOT / "worker" / "__init__.py"
    assert Path(jobdesk.dashboard.__file__) == ROOT / "dashboard" / "__init__.py"


@pytest.mark.parametrize("name", ["shared", "worker", "dashboard"])
def test_a_bare_import_of_a_root_folder_is_refused_naming_the_real_one(name: str) -> None:
    done = _python(f"import {name}", cwd=ROOT)
    assert done.returncode != 0
    assert f"import jobdesk.{name}, not {name}" in done.stderr


def test_one_class_per_error_whatever_the_first_import(tmp_path: Path) -> None:
    code = (
        "import jobdesk.shared.core.errors as a\n"
        "import jobdesk\n"
        "assert jobdesk.PermanentError is a.PermanentError\n"
        "print(a.__file__)\n"
    )
    done = _python(code, cwd=tmp_path, pythonpath=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(ROOT / "shared" / "core" / "errors.py")


@pytest.mark.slow
def test_a_clone_without_symlink_support_imports_and_finds_its_assets(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    _git("-c", "core.symlinks=false", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(clone))
    code = (
        "import jobdesk, jobdesk.worker.runner, jobdesk.dashboard\n"
        "from jobdesk.shared.assets import asset_path\n"
        "from jobdesk.shared.migrate import upgrade\n"
        "print(jobdesk.worker.runner.__file__)\n"
        "print(asset_path('templates', 'layout', 'base.html'))\n"
        "print(asset_path('migrations', 'alembic.ini'))\n"
    )
    done = _python(code, cwd=tmp_path, pythonpath=clone)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        str(clone / "worker" / "runner.py"),
        str(clone / "templates" / "layout" / "base.html"),
        str(clone / "migrations" / "alembic.ini"),
    ]
