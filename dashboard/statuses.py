"""The order the dashboard shows job statuses in: the lifecycle's — `waiting` (held back
by a batch or `after=`) before `queued`, then as `JobStatus` declares them — for the
overview's tiles, the queues' columns and every status filter."""

from __future__ import annotations

from jobdesk.shared.core.states import JobStatus

SHOWN_STATUSES: list[str] = [
    str(JobStatus.WAITING),
    *(str(status) for status in JobStatus if status is not JobStatus.WAITING),
]
