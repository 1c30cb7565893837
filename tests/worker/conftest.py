"""Fixtures for worker tests: real `jobdesk worker` subprocesses on the test database."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.worker.procs import Workers, workers


@pytest.fixture
def procs(db_url: str, tmp_path: Path) -> Iterator[Workers]:
    with workers(db_url, tmp_path) as pool:
        yield pool
