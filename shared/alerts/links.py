"""Where an alert leads: its jobs, its error group, its endpoint, queue, schedule or job.

Paths are relative to the dashboard's root; the dashboard prefixes its mount point,
notifications the public URL (`JOBDESK_ALERT_DASHBOARD_URL`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

__all__ = ["AlertLink", "alert_links"]

#: Finding filter keys → the jobs list's query arguments.
_FILTER_ARGS = {
    "job_type": "type",
    "queue": "queue",
    "status": "status",
    "fingerprint": "fingerprint",
}


@dataclass(frozen=True, slots=True)
class AlertLink:
    label: str
    path: str


def alert_links(details: Mapping[str, Any] | None) -> list[AlertLink]:
    details = details or {}
    links: list[AlertLink] = []
    wanted = details.get("filter") or {}
    args = {arg: str(wanted[key]) for key, arg in _FILTER_ARGS.items() if wanted.get(key)}
    if args.get("fingerprint") and "status" not in args:
        args["status"] = "dead"
    if args:
        label = "the jobs with this error" if "fingerprint" in args else "its jobs"
        links.append(AlertLink(label, "/jobs?" + urlencode(args)))
    if details.get("fingerprint"):
        links.append(AlertLink("dead letters", "/dead"))
    for endpoint in details.get("endpoints") or []:
        if isinstance(endpoint, str):
            links.append(
                AlertLink(f"endpoint {endpoint}", f"/endpoints#endpoint-{quote(endpoint)}")
            )
    queue = wanted.get("queue")
    if isinstance(queue, str):
        links.append(AlertLink(f"queue {queue}", f"/jobs?{urlencode({'queue': queue})}"))
    schedule = details.get("schedule")
    if isinstance(schedule, str):
        links.append(AlertLink(f"schedule {schedule}", f"/schedules#schedule-{quote(schedule)}"))
    job_id = details.get("job_id")
    if isinstance(job_id, int):
        links.append(AlertLink(f"job #{job_id}", f"/jobs/{job_id}"))
    return links
