"""The code blocks of README.md and docs/*.md, run as written.

Each `python`, `sh` and `sql` block says whether it runs (`tests/docs/blocks.py`: an
HTML comment before its fence), and a block that says so is run here:

- Python and shell blocks (and the blocks that continue them) in a fresh interpreter
  started in an empty working directory that holds a migrated SQLite database,
  `jobdesk.db` — the embedded default — or with a fresh migrated PostgreSQL database,
  as the marker says; `JOBDESK_DATABASE_URL` points at it, `JOBDESK_SECRET_KEY` is set
  (the dashboard needs one) and the venv's `bin` is first on `PATH`. Python runs with
  warnings as errors.
- SQL blocks in one transaction on each database the marker names.

A block that fails prints the page and line and the output; a block without a marker
fails `test_every_code_block_says_whether_it_runs`.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from jobdesk.shared.core.db import make_engine
from jobdesk.shared.migrate import upgrade
from jobdesk.shared.settings import Settings
from tests.docs.blocks import Chain, collect

RUNNER = Path(__file__).with_name("run_blocks.py")
CHAINS, PROBLEMS = collect()


def test_every_code_block_says_whether_it_runs() -> None:
    assert PROBLEMS == [], "\n" + "\n".join(PROBLEMS)


def test_the_collector_finds_the_runnable_blocks() -> None:
    """A parser that silently found nothing would pass every run below."""
    languages = {block.language for chain in CHAINS for block in chain.blocks}
    assert languages == {"python", "sh", "sql"}
    assert sum(len(chain.blocks) for chain in CHAINS) >= 12


def _cases() -> list[object]:
    cases = []
    for chain in CHAINS:
        for backend in chain.head.databases or ("sqlite",):
            cases.append(pytest.param(chain, backend, id=f"{chain.where}-{backend}"))
    return cases


def _database(backend: str, request: pytest.FixtureRequest, workdir: Path) -> str:
    """A migrated database of its own: SQLite as `jobdesk.db` in the working directory,
    or a new PostgreSQL database (what a block creates beside Jobdesk's tables leaves
    with it)."""
    if backend == "sqlite":
        shutil.copyfile(request.getfixturevalue("sqlite_template"), workdir / "jobdesk.db")
        return f"sqlite:///{workdir / 'jobdesk.db'}"
    url: str = request.getfixturevalue("empty_db_url")
    engine = make_engine(url, settings=Settings())
    try:
        upgrade(engine)
    finally:
        engine.dispose()
    return url


@pytest.mark.slow
@pytest.mark.parametrize(("chain", "backend"), _cases())
def test_the_block_runs_as_written(
    chain: Chain, backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    url = _database(backend, request, workdir)
    if chain.head.language == "sql":
        _run_sql(chain, backend, url)
    else:
        _run_program(chain, url, workdir, tmp_path / "steps.json")


def _run_sql(chain: Chain, backend: str, url: str) -> None:
    (block,) = chain.blocks
    try:
        if backend == "sqlite":
            with sqlite3.connect(sa.make_url(url).database or "") as db:
                db.executescript(block.source)
        else:
            conninfo = sa.make_url(url).set(drivername="postgresql")
            with psycopg.connect(conninfo.render_as_string(hide_password=False)) as db:
                db.execute(block.source.encode())
    except (sqlite3.Error, psycopg.Error) as exc:
        pytest.fail(f"{block.where} fails on {backend}: {exc}\n\n{block.source}", pytrace=False)


def _run_program(chain: Chain, url: str, workdir: Path, steps: Path) -> None:
    steps.write_text(
        json.dumps(
            [
                {
                    "where": block.where,
                    "language": block.language,
                    "path": str(block.path),
                    "first_line": block.first_line,
                    "source": block.source,
                }
                for block in chain.blocks
            ]
        ),
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBDESK_")}
    env.update(
        JOBDESK_DATABASE_URL=url,
        JOBDESK_SECRET_KEY=secrets.token_urlsafe(48),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    )
    ran = subprocess.run(
        [sys.executable, "-W", "error", str(RUNNER), str(steps)],
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if ran.returncode != 0:
        shown = "\n\n".join(f"{b.where}:\n{b.source}" for b in chain.blocks)
        pytest.fail(
            f"{chain.where} does not run as written (exit {ran.returncode}):\n"
            f"{ran.stderr}{ran.stdout}\n{shown}",
            pytrace=False,
        )
