"""The driver is the only place that knows which database it talks to.

Two guards: no module outside `shared/core/driver/` tests the dialect (a dialect test in
a feature module is a missing driver method), and no statement that writes
`jobdesk_jobs` is sent from anywhere but the driver — checked on the source and, for
every statement the test suite itself sends, on the call stack (`conftest.py`).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
PACKAGES = ("shared", "worker", "dashboard", "jobdesk")
DRIVER = ROOT / "shared" / "core" / "driver"

#: Ways code tells the databases apart.
DIALECT_TEST = re.compile(
    r"is_postgresql\(|is_sqlite\(|dialect\.name|\.dialect\s*==|get_backend_name\(|"
    r"\bpg\.insert\(|\bsqlite\.insert\(|from sqlalchemy\.dialects import|"
    r"sqlalchemy\.dialects\.(?:postgresql|sqlite)|\b_(?:POSTGRESQL|SQLITE|PG)_[A-Z_]+\b"
)
#: Statements that write the jobs table, as Core or as SQL text.
JOBS_WRITE = re.compile(
    r"sa\.(?:update|insert|delete)\(jobs\)|(?:UPDATE|INSERT\s+INTO|DELETE\s+FROM)\s+jobdesk_jobs\b",
    re.IGNORECASE,
)


def _sources() -> list[Path]:
    return sorted(
        path
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if DRIVER not in path.parents
    )


def _offenders(pattern: re.Pattern[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in _sources():
        name = str(path.relative_to(ROOT))
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                found.setdefault(name, []).append(f"{number}: {line.strip()}")
    return found


def test_no_module_outside_the_driver_tests_the_dialect() -> None:
    assert _offenders(DIALECT_TEST) == {}


def test_no_module_outside_the_driver_writes_the_jobs_table() -> None:
    assert _offenders(JOBS_WRITE) == {}
