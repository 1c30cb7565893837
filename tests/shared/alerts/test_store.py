"""Reading and acknowledging alerts (used by the dashboard and the CLI)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from jobdesk.shared.alerts.models import alerts
from jobdesk.shared.alerts.store import acknowledge_alert, count_open_alerts, list_alerts
from jobdesk.shared.core.audit import audit_log
from tests.shared.alerts.helpers import NOW


def test_acknowledge_writes_the_note_and_an_audit_row(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        alert_id = conn.execute(
            sa.insert(alerts)
            .values(rule="queue_stalled", subject="email", message="m")
            .returning(alerts.c.id)
        ).scalar_one()
        assert acknowledge_alert(conn, alert_id, actor="ana", note="looking", now=NOW)
        assert not acknowledge_alert(conn, alert_id + 99, actor="ana", note="x", now=NOW)
    with engine.connect() as conn:
        (row,) = list_alerts(conn, status="open")
        assert (row.acknowledged_by, row.acknowledged_note) == ("ana", "looking")
        assert row.acknowledged_at == NOW
        assert count_open_alerts(conn) == 1
        audit = conn.execute(sa.select(audit_log)).one()
    assert (audit.actor, audit.action, audit.reason) == ("ana", "alert.acknowledge", "looking")
    assert audit.details == {"alert_id": alert_id, "rule": "queue_stalled", "subject": "email"}


def test_list_alerts_pages_by_id_and_checks_the_status(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        for n in range(5):
            conn.execute(sa.insert(alerts).values(rule="r", subject=f"s{n}", message="m"))
    with engine.connect() as conn:
        first = list_alerts(conn, limit=2)
        rest = list_alerts(conn, limit=10, before_id=first[-1].id)
        assert [r.subject for r in first + rest] == ["s4", "s3", "s2", "s1", "s0"]
        with pytest.raises(ValueError, match="open or resolved"):
            list_alerts(conn, status="closed")
