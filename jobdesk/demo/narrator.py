"""Follows the demo story in the database and prints its milestones.

Everything it reports is read through `shared/` (counts, the report run, alerts) — what
the dashboard shows, as lines in the terminal: the welcome emails going out, the CRM
webhooks failing and going dead, the report's chunks, the alerts. `status()` is the
same picture as data (served by the demo console's `/state.json`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from jobdesk.demo.story import CRM_ENDPOINT, SIGNUP_EVENT
from jobdesk.shared.alerts import store as alerts
from jobdesk.shared.core.states import JobStatus
from jobdesk.shared.operator.queries.stats import counts_by_status_queue_type
from jobdesk.shared.reports import runs as reports
from jobdesk.shared.webhooks.events import event_counts

Printer = Callable[[str], None]


@dataclass
class StoryStatus:
    signed_up: int = 0
    users_planned: int = 0
    report_job_id: int | None = None
    crm: dict[str, int] = field(default_factory=dict)
    email: dict[str, int] = field(default_factory=dict)
    report: dict[str, Any] | None = None
    open_alerts: list[dict[str, Any]] = field(default_factory=list)
    phase: str = "starting"

    def as_dict(self) -> dict[str, Any]:
        return {
            "signed_up": self.signed_up,
            "users_planned": self.users_planned,
            "report_job_id": self.report_job_id,
            "crm": dict(self.crm),
            "email": dict(self.email),
            "report": self.report,
            "open_alerts": list(self.open_alerts),
            "phase": self.phase,
        }


class Narrator:
    """Polls every `interval` seconds until `stop` is set; prints what changed."""

    def __init__(
        self,
        engine: sa.Engine,
        printer: Printer,
        *,
        interval: float = 1.0,
        triage_hint: Callable[[], str] = lambda: "",
    ) -> None:
        self.engine = engine
        self.printer = printer
        self.interval = interval
        self.triage_hint = triage_hint
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._status = StoryStatus()
        self._seen_alerts: set[int] = set()
        self._last_crm: dict[str, int] = {}
        self._last_report: tuple[Any, ...] | None = None
        self._announced_dead = False
        self._delivered_after_triage = 0
        self._thread = threading.Thread(target=self._loop, name="demo-narrator", daemon=True)

    # -- the story player reports its progress here --------------------------------------

    def planned(self, users: int) -> None:
        with self._lock:
            self._status.users_planned = users
            self._status.phase = "signing up"

    def signed_up(self) -> None:
        with self._lock:
            self._status.signed_up += 1

    def report_requested(self, job_id: int) -> None:
        with self._lock:
            self._status.report_job_id = job_id
            self._status.phase = "running"

    def status(self) -> dict[str, Any]:
        with self._lock:
            return self._status.as_dict()

    # -- polling ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _loop(self) -> None:
        while not self.stop.wait(self.interval):
            try:
                self.poll()
            except sa.exc.SQLAlchemyError as exc:
                # A busy moment on SQLite or a PostgreSQL hiccup: say so, look again.
                self.printer(f"  (could not read the story's progress: {exc.__class__.__name__})")

    def poll(self) -> None:
        with self.engine.connect() as conn:
            counts = counts_by_status_queue_type(conn)
            with self._lock:
                report_job = self._status.report_job_id
            run = reports.find_run_for_job(conn, report_job) if report_job else None
            open_rows = alerts.list_alerts(conn, status=alerts.OPEN, limit=20)
        # Only the sign-ups' own CRM webhooks count towards "every sign-up reached the
        # CRM": not alert webhooks, not dead letters support already decided about.
        with self.engine.connect() as conn:
            crm = event_counts(conn, CRM_ENDPOINT, SIGNUP_EVENT)
        email = _by_status(counts, "email.send")
        with self._lock:
            self._status.crm = crm
            self._status.email = email
            if run is not None:
                self._status.report = {
                    "run_id": run["id"],
                    "status": run["status"],
                    "chunks_done": run["chunks_done"],
                    "chunks_total": run["chunks_total"],
                    "rows": run["rows"],
                    "file": run["file_path"],
                }
            self._status.open_alerts = [
                {"id": row.id, "rule": row.rule, "subject": row.subject, "message": row.message}
                for row in open_rows
            ]
            planned = self._status.users_planned
            signed = self._status.signed_up
        self._tell_crm(crm, planned, signed)
        self._tell_report(run)
        self._tell_alerts(open_rows)

    def _tell_crm(self, crm: dict[str, int], planned: int, signed: int) -> None:
        waiting = crm.get(JobStatus.FAILED, 0)
        dead = crm.get(JobStatus.DEAD, 0)
        delivered = crm.get(JobStatus.SUCCEEDED, 0)
        # Jobs move between queued, running and failed at every attempt; only the
        # milestones are worth a line.
        milestone = {"failing": int(waiting > 0), "dead": dead, "delivered": delivered}
        if milestone == self._last_crm:
            return
        self._last_crm = milestone
        self.printer(
            f"  CRM webhooks: {waiting} waiting to retry, {dead} dead, {delivered} delivered"
        )
        if not self._announced_dead and planned and signed >= planned and dead >= planned:
            self._announced_dead = True
            with self._lock:
                self._status.phase = "triage"
            hint = self.triage_hint()
            if hint:
                self.printer(hint)
        if self._announced_dead and delivered > self._delivered_after_triage:
            self._delivered_after_triage = delivered
            if delivered >= planned:
                with self._lock:
                    self._status.phase = "recovered"
                self.printer(
                    "  Every sign-up reached the CRM. That's the story; "
                    "explore the dashboard, then Ctrl-C to stop."
                )

    def _tell_report(self, run: dict[str, Any] | None) -> None:
        if run is None:
            return
        key = (run["status"], run["chunks_done"], run["chunks_total"])
        if key == self._last_report:
            return
        self._last_report = key
        line = (
            f"  Nightly report run #{run['id']}: {run['status']}, "
            f"{run['chunks_done']}/{run['chunks_total']} chunks, {run['rows']} rows"
        )
        if run["file_path"]:
            line += f" → {run['file_path']}"
        if run["error"]:
            line += f" ({run['error']})"
        self.printer(line)

    def _tell_alerts(self, rows: list[sa.Row[Any]]) -> None:
        for row in reversed(rows):
            if row.id in self._seen_alerts:
                continue
            self._seen_alerts.add(row.id)
            self.printer(f"  ALERT #{row.id} [{row.rule}] {row.message}")


def _by_status(counts: list[Any], job_type: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for row in counts:
        if row.job_type == job_type:
            found[str(row.status)] = found.get(str(row.status), 0) + row.count
    return found
