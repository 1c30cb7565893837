"""History: what finished per minute, 15 minutes or 2 hours — processed, failed, dead
and the queue wait — over 1 h, 24 h or 7 d, for every queue and type or one of each.

Drawn from the rollup the maintenance leader keeps (`jobdesk.shared.history`), so the
page costs the same at a thousand jobs and at millions."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from flask import Blueprint, request

from jobdesk.dashboard import auth, db
from jobdesk.dashboard.charts import Chart, bar_chart
from jobdesk.dashboard.htmx import render
from jobdesk.dashboard.templating import duration, number, plural, zone_abbreviation
from jobdesk.dashboard.viewer_zone import viewer_zone
from jobdesk.shared.history.rollup import SETTLE
from jobdesk.shared.operator.models import Role
from jobdesk.shared.operator.queries.history import (
    SPANS,
    Bucket,
    History,
    HistoryFilters,
    read_history,
)

bp = Blueprint("history", __name__)

#: How each range's bucket is named in captions ("per 15 minutes").
STEP_NAMES = {"1h": "minute", "24h": "15 minutes", "7d": "2 hours"}


@bp.get("/history")
@auth.requires(Role.VIEWER)
def index() -> Any:
    filters = HistoryFilters.from_args(request.args)
    with db.read() as conn:
        now = db.now(conn)
        found = read_history(conn, filters, now=now)
    return render(
        "history/index.html",
        "history/_charts.html",
        "history-charts",
        filters=filters,
        args=filters.to_args(),
        spans=tuple(SPANS),
        history=found,
        charts=_charts(found),
        step_name=STEP_NAMES[filters.span],
        settle_minutes=int(SETTLE.total_seconds() // 60),
        now=now,
    )


def _count(value: float) -> str:
    return number(int(value))


def _charts(found: History) -> list[Chart]:
    """The four charts, their times on the viewer's clock (buckets start on UTC
    multiples of the step, so with a half-hour zone they start at :30)."""
    span, step = found.span, STEP_NAMES[found.span.name]
    zone = viewer_zone().zone
    named = zone_abbreviation(found.end)
    pattern = "%a %d %b %H:%M" if span.name == "7d" else "%H:%M"

    def when(moment: datetime) -> str:
        return f"{moment.astimezone(zone):{pattern}} {named}"

    common: dict[str, Any] = {
        "label": lambda moment: moment.astimezone(zone).strftime(span.label_format),
        "label_every": span.label_every,
        "x_title": f"Time ({named}), one bar per {step}",
    }

    def counted(field: str, caption: str, unit: str, verb: str, css: str) -> Chart:
        total, peak = found.total(field), int(found.peak(field))
        return bar_chart(
            found.buckets,
            lambda b: getattr(b, field),
            caption=f"{caption} (per {step})",
            summary=f"{caption} per {step} over the last {span.name}: {total:,} in all, "
            f"at most {peak:,} in one {step}",
            describe=lambda b: f"{when(b.start)}: {plural(getattr(b, field), unit)} {verb}",
            tick=_count,
            css=css,
            **common,
        )

    def waited(b: Bucket) -> str:
        if not b.waited:
            return f"{when(b.start)}: no measured wait"
        return (
            f"{when(b.start)}: mean wait {duration(b.wait_seconds_mean)}, "
            f"longest {duration(b.wait_seconds_max)} ({b.waited:,} attempts)"
        )

    return [
        counted("processed", "Attempts succeeded", "attempt", "succeeded", "processed"),
        counted("failed", "Attempts failed", "attempt", "failed", "failed"),
        counted("dead", "Jobs that went dead", "job", "went dead", "dead"),
        bar_chart(
            found.buckets,
            lambda b: b.wait_seconds_mean,
            caption=f"Queue wait (mean and longest per {step})",
            summary=f"Queue wait per {step} over the last {span.name}: mean "
            f"{duration(found.wait_seconds_mean)}, longest {duration(found.wait_seconds_max)}",
            describe=waited,
            tick=duration,
            seconds=True,
            cap=lambda b: b.wait_seconds_max,
            css="wait",
            **common,
        ),
    ]
