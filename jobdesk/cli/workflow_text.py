"""How batches and a job's place in a workflow read in the terminal, and in `--json`.

Shared by `jobdesk batches …` and `jobdesk jobs show`, so a batch reads the same in
both. Only formatting lives here: the rows come from `shared/workflows/queries.py`.
Errors and results are masked as every page masks them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

#: Job ids printed at most in one line; the rest are counted ("… and 120 more").
IDS_SHOWN = 20


def when(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def batch_dict(row: Any) -> dict[str, Any]:
    """A `BatchRow` as `--json` shows it (its derived `state` included)."""
    return {
        "id": row.id,
        "name": row.name,
        "state": row.state,
        "created_at": when(row.created_at),
        "finished_at": when(row.finished_at),
        "total": row.total,
        "finished": row.finished,
        "succeeded": row.succeeded,
        "on_success_job_id": row.on_success_job_id,
        "on_finish_job_id": row.on_finish_job_id,
        "cancelled_at": when(row.cancelled_at),
        "cancelled_by": row.cancelled_by,
        "cancel_reason": row.cancel_reason,
    }


def batch_title(row: Any) -> str:
    """`batch #12 "nightly 2026-12-03"` (the name only when it has one)."""
    return f'batch #{row.id} "{row.name}"' if row.name else f"batch #{row.id}"


def batch_progress(row: Any) -> str:
    """`running, 3 of 5 children final, 2 succeeded`."""
    return f"{row.state}, {row.finished} of {row.total} children final, {row.succeeded} succeeded"


def ordered_counts(counts: Mapping[str, int]) -> str:
    """`queued=2 running=1 succeeded=2`, in lifecycle order."""
    from jobdesk.shared.core.states import ALL_STATUSES

    order = {status.value: index for index, status in enumerate(ALL_STATUSES)}
    shown = sorted(counts.items(), key=lambda item: (order.get(item[0], len(order)), item[0]))
    return " ".join(f"{status}={n}" for status, n in shown if n) or "no children"


def job_ids(ids: Sequence[int]) -> str:
    """`#4 #6 #7`, the first `IDS_SHOWN` of them and how many more."""
    shown = " ".join(f"#{job_id}" for job_id in ids[:IDS_SHOWN])
    more = len(ids) - IDS_SHOWN
    return f"{shown} … and {more:,} more" if more > 0 else shown


def status_word(status: str | None, resolution: str | None = None) -> str:
    """A job's status as a line shows it: `dead (requeued)`; `pruned` when it is gone."""
    if status is None:
        return "pruned"
    return f"{status} ({resolution})" if resolution else status


def linked_jobs(rows: Iterable[Mapping[str, Any]]) -> str:
    """`#10 report.fetch succeeded · #11 report.fetch dead`."""
    return " · ".join(
        f"#{row['id']} {row.get('job_type') or '?'} "
        f"{status_word(row.get('status'), row.get('resolution'))}"
        for row in rows
    )


def first_line(error: str | None, limit: int = 100) -> str:
    """An error's first line, masked and cut to `limit` characters."""
    from jobdesk.shared.core.masking import mask_text

    lines = mask_text(error or "").strip().splitlines()
    line = lines[0] if lines else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def masked_error(error: str | None) -> str | None:
    from jobdesk.shared.core.masking import mask_text

    return None if error is None else mask_text(error)


def masked_document(value: Any) -> Any:
    from jobdesk.shared.core.masking import mask_payload

    return mask_payload(value)
