"""The built artifacts — the sdist and the wheel built from it, as `python -m build` makes
them — each installed into a fresh virtualenv beside a host app that has its own `shared`
and `worker` packages, a stray `migrations/env.py`, its own Alembic history and its own
`jobs`, `users`, `alerts` and `workers` tables.

The app migrates its own schema, then `jobdesk migrate`; a sign-up enqueues in the app's
transaction with `from jobdesk import enqueue`; `jobdesk worker` runs the app's job
module; gunicorn serves the dashboard (`/healthz` and a page) — and the app's tables and
history are untouched. This is the installation a user gets, not the checkout.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from jobdesk.shared.migrate import head_revision
from tests.conftest import PG_ADMIN_URL
from tests.worker.jobs.smtp_server import free_port

ROOT = Path(__file__).resolve().parents[2]
HOST_APP = Path(__file__).resolve().parent / "host_app"
SECRET = "packaging-test-secret-0123456789abcdefghijklmn"
APP_TABLES = ("alembic_version", "users", "jobs", "alerts", "workers")

pytestmark = pytest.mark.slow


def run(args: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 180) -> str:
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@contextmanager
def _built_once(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[Path | None]:
    """A directory every test process of the run shares, made by whichever comes first.

    Yields the directory to fill (None when an earlier process already made it); the
    other processes wait on its lock meanwhile. Under pytest-xdist each process has its
    own base temporary directory inside the run's one; building the sdist, the wheel and
    a virtualenv per artifact once per run instead of once per process saves minutes."""
    target = _shared_dir(tmp_path_factory, name)
    with target.with_name(f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / ".complete").exists():
            yield None
            return
        shutil.rmtree(target, ignore_errors=True)  # a half-made one from a failed build
        target.mkdir()
        yield target
        (target / ".complete").touch()


def _shared_dir(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """`name` in the run's temporary directory (the one above each xdist process's own)."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """`python -m build`: the sdist, then the wheel built from that sdist (once a run)."""
    with _built_once(tmp_path_factory, "dist") as out:
        if out is not None:
            run(
                [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
                cwd=ROOT,
                env=dict(os.environ),
            )
    out = _shared_dir(tmp_path_factory, "dist")
    [sdist] = out.glob("jobdesk-*.tar.gz")
    [wheel] = out.glob("jobdesk-*.whl")
    return {"sdist": sdist, "wheel": wheel}


@pytest.fixture(scope="session")
def wheel(dist: dict[str, Path]) -> Path:
    return dist["wheel"]


@pytest.fixture
def venv(
    request: pytest.FixtureRequest, dist: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A fresh virtualenv with nothing but the artifact and its dependencies (one per
    artifact for the run; `pip install jobdesk-X.tar.gz` builds the wheel itself).

    The suite's own pip installs into it (`pip --python`): a pip of the virtualenv's own
    would cost `ensurepip` 3 s of CPU per virtualenv for nothing under test. And nothing
    is compiled at install (`--no-compile`): the commands below compile what they import,
    where compiling every module of every dependency cost another 3 s."""
    kind: str = request.param
    name = f"venv-{kind}"
    with _built_once(tmp_path_factory, name) as made:
        if made is not None:
            path = made / "env"
            env = dict(os.environ)
            run([sys.executable, "-m", "venv", "--without-pip", str(path)], cwd=ROOT, env=env)
            pip = [sys.executable, "-m", "pip", "--python", str(path / "bin" / "python"),
                   "install", "--quiet", "--no-compile", "--disable-pip-version-check"]  # fmt: skip
            run([*pip, str(dist[kind])], cwd=ROOT, env=env, timeout=600)
    return _shared_dir(tmp_path_factory, name) / "env"


def test_the_wheels_only_top_level_package_is_jobdesk(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/", 1)[0] for name in archive.namelist()}
        names = archive.namelist()
    assert tops == {"jobdesk", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}
    for asset in ("jobdesk/migrations/env.py", "jobdesk/migrations/alembic.ini",
                  "jobdesk/templates/layout/base.html",
                  "jobdesk/templates/email/welcome.txt",
                  "jobdesk/migrations/versions/jobdesk_0002_usernames_case_insensitive.py",
                  "jobdesk/shared/operator/common_passwords.txt"):  # fmt: skip
        assert asset in names, asset
    assert not [name for name in names if "__pycache__" in name]


def test_the_sdist_ships_the_root_folders_as_real_files(dist: dict[str, Path]) -> None:
    with tarfile.open(dist["sdist"]) as archive:
        members = archive.getmembers()
    links = [member.name for member in members if member.issym() or member.islnk()]
    assert links == []
    names = {member.name.split("/", 1)[1] for member in members if "/" in member.name}
    for shipped in ("shared/__init__.py", "worker/runner.py", "dashboard/app.py",
                    "templates/layout/base.html", "static/dashboard.css",
                    "migrations/env.py", "migrations/alembic.ini",
                    "jobdesk/_layout.py"):  # fmt: skip
        assert shipped in names, shipped
    assert not [name for name in names if name.startswith(("tests/", "bench/"))]


@pytest.fixture
def app_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'app.db'}"
        return
    request.getfixturevalue("pg_url")  # skips (or fails in CI) without PostgreSQL
    name = f"jobdesk_hostapp_{os.getpid()}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    yield sa.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def app_snapshot(url: str) -> dict[str, Any]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            inspector = sa.inspect(conn)
            return {
                name: (
                    [(c["name"], str(c["type"])) for c in inspector.get_columns(name)],
                    sorted(str(ix["name"]) for ix in inspector.get_indexes(name)),
                )
                for name in APP_TABLES
            }
    finally:
        engine.dispose()


def scalar(url: str, sql: str) -> Any:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text(sql)).scalar()
    finally:
        engine.dispose()


# The sdist's installation is the same package as the wheel's: one database shows it.
@pytest.mark.parametrize(
    ("venv", "app_database"),
    [("wheel", "sqlite"), ("wheel", "postgresql"), ("sdist", "sqlite")],
    indirect=True,
)
def test_jobdesk_lives_inside_a_host_app(venv: Path, app_database: str, tmp_path: Path) -> None:
    app = tmp_path / "app"
    shutil.copytree(HOST_APP, app)
    bin_dir = venv / "bin"
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(tmp_path),
        "APP_DATABASE_URL": app_database,
        "JOBDESK_DATABASE_URL": app_database,
        "JOBDESK_SECRET_KEY": SECRET,
        "JOBDESK_POLL_INTERVAL_SECONDS": "0.2",
    }
    # The app's own history first, as it would be in production.
    run([str(bin_dir / "alembic"), "-c", "app_alembic.ini", "upgrade", "head"], cwd=app, env=env)
    before = app_snapshot(app_database)

    out = run([str(bin_dir / "jobdesk"), "migrate"], cwd=app, env=env)
    assert f"schema upgraded empty -> {head_revision()}" in out
    assert "already at" in run([str(bin_dir / "jobdesk"), "migrate"], cwd=app, env=env)

    job_id = int(run([str(bin_dir / "python"), "signup.py", "7"], cwd=app, env=env).strip())
    worker = subprocess.Popen(
        [str(bin_dir / "jobdesk"), "worker", "--jobs", "app_jobs", "--queues", "app"],
        cwd=app,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        status = None
        while time.monotonic() < deadline:
            status = scalar(app_database, f"SELECT status FROM jobdesk_jobs WHERE id = {job_id}")
            if status == "succeeded" or worker.poll() is not None:
                break
            time.sleep(0.2)
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert status == "succeeded", output
    assert worker.returncode == 0, output
    assert scalar(app_database, "SELECT greeted FROM users WHERE id = 7") in (True, 1)

    port = free_port()
    with (tmp_path / "gunicorn.log").open("w") as log:
        gunicorn = subprocess.Popen(
            [
                str(bin_dir / "gunicorn"),
                "-b",
                f"127.0.0.1:{port}",
                "jobdesk.dashboard:create_app()",
            ],
            cwd=app,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            health = _get(f"http://127.0.0.1:{port}/healthz", until=time.monotonic() + 30)
            page = _get(f"http://127.0.0.1:{port}/login", until=time.monotonic() + 30)
        finally:
            gunicorn.terminate()
            gunicorn.wait(20)
    assert "ok" in health.lower()
    assert "Jobdesk" in page
    assert 'href="/static/' in page or "/static/" in page

    assert app_snapshot(app_database) == before
    assert scalar(app_database, "SELECT version_num FROM alembic_version") == "12b684f79665"
    assert scalar(app_database, "SELECT count(*) FROM jobs") == 1  # the app's own row
    missing = subprocess.run(
        [str(bin_dir / "python"), "-c", "import shared"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode != 0, "the wheel installed a top-level `shared` package"


def _get(url: str, *, until: float) -> str:
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                assert response.status == 200
                return str(response.read().decode())
        except OSError:
            if time.monotonic() > until:
                raise
            time.sleep(0.2)
