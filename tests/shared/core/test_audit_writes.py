"""Every audit row is written by `jobdesk.shared.core.audit` (`record` / `record_many`):
an operator command validates, changes through the driver or its feature's store, and
leaves its trail through that one helper — never by inserting into the audit table
itself."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("shared", "worker", "dashboard", "jobdesk")
HELPER = ROOT / "shared" / "core" / "audit.py"
AUDIT_WRITE = re.compile(
    r"sa\.insert\(audit_log\)|audit_log\.insert\(|INSERT\s+INTO\s+jobdesk_audit_log\b",
    re.IGNORECASE,
)


def test_only_the_audit_helper_writes_audit_rows() -> None:
    found = {
        str(path.relative_to(ROOT)): number
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != HELPER
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if AUDIT_WRITE.search(line)
    }
    assert found == {}


def test_the_helper_itself_is_seen_by_the_pattern() -> None:
    assert AUDIT_WRITE.search(HELPER.read_text())
