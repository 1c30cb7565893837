"""Run a static tool (mypy, lint-imports) on the package as users import it.

The root folders (`shared/`, `worker/`, `dashboard/`, …) become `jobdesk.shared` and so
on only when built or imported (`jobdesk/_layout.py`); tools that read files without
importing them need the package tree itself. This builds that tree under
`build/package-view/jobdesk/` out of links to the real files (never committed), runs
the tool there and rewrites the paths it prints back to the repository's own
(`jobdesk/shared/core/claim.py` -> `shared/core/claim.py`), so each file has one module
name and every reported path is one `git blame` knows.

    python .ci/package_view.py mypy [args…]
    python .ci/package_view.py lint-imports [args…]
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VIEW = ROOT / "build" / "package-view"
MAPPED = ("shared", "worker", "dashboard", "templates", "static", "migrations")
_VIEW_PATH = re.compile(r"(?<![\w/.-])jobdesk/(" + "|".join(map(re.escape, MAPPED)) + r")\b")


def _link(target: Path, link: Path) -> None:
    try:
        link.symlink_to(target, target_is_directory=target.is_dir())
    except OSError:  # no symlinks here (Windows without the privilege): copy instead
        if target.is_dir():
            shutil.copytree(target, link, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(target, link)


def build_view() -> Path:
    package = VIEW / "jobdesk"
    if package.exists():
        shutil.rmtree(package)
    package.mkdir(parents=True)
    for entry in (ROOT / "jobdesk").iterdir():
        if entry.name != "__pycache__":
            _link(entry, package / entry.name)
    for name in MAPPED:
        _link(ROOT / name, package / name)
    return VIEW


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    tool, *args = argv
    view = build_view()
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(view), os.environ.get("PYTHONPATH")])),
    )
    if tool == "mypy":
        args = ["--config-file", str(ROOT / "pyproject.toml"), *args]
    elif tool == "lint-imports":
        args = [str(ROOT / "pyproject.toml"), *args]
    binary = shutil.which(tool, path=str(Path(sys.executable).parent)) or tool
    done = subprocess.run(
        [binary, *args], cwd=view, env=env, capture_output=True, text=True, check=False
    )
    for stream, text in ((sys.stdout, done.stdout), (sys.stderr, done.stderr)):
        stream.write(_VIEW_PATH.sub(r"\1", text))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
