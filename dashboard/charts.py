"""Chart geometry for the dashboard's inline SVG bar charts (drawn by the `chart` macro).

A chart stretches to its panel's width without scaling its text: the SVG has no
viewBox, its horizontal positions are percentages of its width and its vertical ones
pixels, so bars widen with the panel while the time labels keep their size (at 390 px
and on a wide screen alike). The y ticks are HTML beside it. The y axis ends at a round
number (`nice_ceiling`) with a tick at its half, so the ticks read as round values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

#: Round axis ends; each has a whole half, so a count axis never ticks at 2.5.
_NICE = (1.0, 2.0, 4.0, 6.0, 8.0, 10.0)
#: Pixels above the plot (room for the top tick) and below it (the time labels).
TOP = 6
LABEL_ROW = 18


class Timed(Protocol):
    @property
    def start(self) -> datetime: ...


@dataclass(frozen=True, slots=True)
class Bar:
    #: Left edge and width in percent of the chart's width.
    x: float
    width: float
    #: Top edge and height in pixels (an empty bucket draws a thin baseline).
    y: float
    height: float
    empty: bool
    title: str
    #: A second value drawn as a mark (the worst wait): its top in pixels, or None.
    cap_y: float | None = None


@dataclass(frozen=True, slots=True)
class Chart:
    caption: str
    #: The text alternative: what the chart shows, in one sentence.
    summary: str
    bars: list[Bar]
    top_label: str
    mid_label: str
    #: (left edge in percent, text) of each time label.
    x_labels: list[tuple[float, str]]
    x_title: str
    plot_height: int
    css: str = ""

    @property
    def height(self) -> int:
        return TOP + self.plot_height + LABEL_ROW

    @property
    def bottom(self) -> int:
        return TOP + self.plot_height

    @property
    def middle(self) -> float:
        return TOP + self.plot_height / 2

    @property
    def top(self) -> int:
        return TOP


def nice_ceiling(peak: float, *, whole: bool) -> float:
    """The smallest round number at or above `peak` (at least 2 for whole counts)."""
    if peak <= 0:
        return 2.0 if whole else 1.0
    power = 10.0 ** math.floor(math.log10(peak))
    # ten times `power` is above the peak, so a step always fits (the tolerance absorbs
    # rounding).
    top = next(step * power for step in _NICE if step * power >= peak * (1 - 1e-9))
    return max(top, 2.0) if whole else top


def bar_chart(
    buckets: Sequence[Timed],
    value: Callable[[Any], float | None],
    *,
    caption: str,
    summary: str,
    describe: Callable[[Any], str],
    label: Callable[[datetime], str],
    label_every: int,
    x_title: str,
    tick: Callable[[float], str],
    seconds: bool = False,
    cap: Callable[[Any], float | None] | None = None,
    plot_height: int = 120,
    css: str = "",
) -> Chart:
    """Bars of `value` per bucket (and `cap` marks). `label` writes a bucket's start under
    every `label_every`-th bar, `tick` an axis value with its unit; `seconds` says the
    values are durations rather than whole counts."""
    count = max(1, len(buckets))
    values = [value(b) for b in buckets]
    caps = [cap(b) for b in buckets] if cap else [None] * len(buckets)
    peak = max((v for v in [*values, *caps] if v is not None), default=0.0)
    top = nice_ceiling(float(peak), whole=not seconds)
    bottom = TOP + plot_height

    def pixels(v: float) -> float:
        return round(plot_height * min(1.0, float(v) / top), 2)

    bars = []
    for index, (bucket, v, c) in enumerate(zip(buckets, values, caps, strict=True)):
        height = max(1.5, pixels(v)) if v else 1.5
        bars.append(
            Bar(
                x=round((index + 0.12) * 100 / count, 3),
                width=round(76 / count, 3),
                y=round(bottom - height, 2),
                height=height,
                empty=not v,
                title=describe(bucket),
                cap_y=None if c is None else round(max(TOP, bottom - pixels(c) - 1), 2),
            )
        )
    return Chart(
        caption=caption,
        summary=summary,
        bars=bars,
        top_label=tick(top),
        mid_label=tick(top / 2),
        x_labels=[
            (round(i * 100 / count, 3), label(buckets[i].start))
            for i in range(0, len(buckets), label_every)
        ],
        x_title=x_title,
        plot_height=plot_height,
        css=css,
    )


def dead_trend_chart(
    trend: Sequence[Any],
    label: str,
    *,
    hour: Callable[[datetime], str],
    zone: Callable[[datetime | None], str],
    tick: Callable[[float], str],
    jobs: Callable[[int], str],
) -> Chart:
    """The hourly dead-letter trend (`TrendBucket`s) of the overview and Dead letters,
    its hours on the viewer's clock (`hour`) and its zone named (`zone`)."""
    named = zone(trend[-1].start if trend else None)
    return bar_chart(
        trend,
        lambda b: b.count,
        caption="",
        summary=f"{label} (hours in {named})",
        describe=lambda b: f"{hour(b.start)} {zone(b.start)}: {jobs(b.count)} went dead",
        label=hour,
        label_every=6,
        x_title=f"Hour ({named})",
        tick=tick,
        plot_height=72,
        css="trend",
    )
