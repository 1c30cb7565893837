"""Chart geometry for the dashboard's inline SVG bar charts (drawn by the `chart` macro).

A chart stretches to its panel's width: the SVG holds only shapes in a viewBox of one
unit per bucket by 100 (`preserveAspectRatio="none"`), and every text — the y ticks, the
time labels, the axis title — is HTML around it, so text keeps its size at 390 px and on
a wide screen alike. The y axis ends at a round number (`nice_ceiling`) with a tick at
its half, so the ticks read as round values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

#: Round axis ends; each has a whole half, so a count axis never ticks at 2.5.
_NICE = (1.0, 2.0, 4.0, 6.0, 8.0, 10.0)


class Timed(Protocol):
    @property
    def start(self) -> datetime: ...


@dataclass(frozen=True, slots=True)
class Bar:
    #: Height in percent of the axis (0 draws the empty-bucket baseline).
    height: float
    #: A second value drawn as a mark at that height (the worst wait), or None.
    cap: float | None
    title: str


@dataclass(frozen=True, slots=True)
class Chart:
    caption: str
    #: The text alternative: what the chart shows, in one sentence.
    summary: str
    bars: list[Bar]
    top_label: str
    mid_label: str
    x_labels: list[str]
    x_title: str
    css: str = ""


def nice_ceiling(peak: float, *, whole: bool) -> float:
    """The smallest round number at or above `peak` (at least 2 for whole counts)."""
    if peak <= 0:
        return 2.0 if whole else 1.0
    power = 10.0 ** math.floor(math.log10(peak))
    # ten times `power` is above the peak, so a step always fits (the tolerance absorbs rounding).
    top = next(step * power for step in _NICE if step * power >= peak * (1 - 1e-9))
    return max(top, 2.0) if whole else top


def bar_chart(
    buckets: Sequence[Timed],
    value: Callable[[Any], float | None],
    *,
    caption: str,
    summary: str,
    describe: Callable[[Any], str],
    label_format: str,
    label_every: int,
    x_title: str,
    tick: Callable[[float], str],
    seconds: bool = False,
    cap: Callable[[Any], float | None] | None = None,
    css: str = "",
) -> Chart:
    """Bars of `value` per bucket (and `cap` marks); `tick` writes an axis value (with its
    unit), `seconds` says the values are durations rather than whole counts."""
    values = [value(b) for b in buckets]
    caps = [cap(b) for b in buckets] if cap else [None] * len(buckets)
    peak = max((v for v in [*values, *caps] if v is not None), default=0.0)
    top = nice_ceiling(float(peak), whole=not seconds)

    def percent(v: float | None) -> float | None:
        return None if v is None else round(min(100.0, 100.0 * float(v) / top), 2)

    bars = [
        Bar(percent(v) or 0.0, percent(c), describe(b))
        for b, v, c in zip(buckets, values, caps, strict=True)
    ]
    return Chart(
        caption=caption,
        summary=summary,
        bars=bars,
        top_label=tick(top),
        mid_label=tick(top / 2),
        x_labels=[b.start.strftime(label_format) for b in buckets[::label_every]],
        x_title=x_title,
        css=css,
    )


def dead_trend_chart(trend: Sequence[Any], label: str, tick: Callable[[float], str]) -> Chart:
    """The hourly dead-letter trend (`TrendBucket`s) of the overview and Dead letters."""
    return bar_chart(
        trend,
        lambda b: b.count,
        caption="",
        summary=f"{label}: {sum(b.count for b in trend):,} in all, "
        f"at most {max((b.count for b in trend), default=0):,} in one hour",
        describe=lambda b: f"{b.start:%H:00} UTC: {b.count:,} went dead",
        label_format="%H:00",
        label_every=6,
        x_title="Hour (UTC)",
        tick=tick,
        css="trend",
    )
