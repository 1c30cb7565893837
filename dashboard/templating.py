"""Jinja filters and globals: times (in the viewer's zone, `viewer_zone.py`), durations,
counts, masking and making invisible characters visible. Nothing here marks job data as
safe HTML — autoescape does its job on every value, and these filters return plain text;
the one exception, `breakable`, escapes the text itself and adds nothing but `<wbr>`."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from flask import Flask, request, url_for
from markupsafe import Markup, escape

from jobdesk.dashboard import auth, csrf
from jobdesk.dashboard.charts import Chart, dead_trend_chart
from jobdesk.dashboard.navigation import here
from jobdesk.dashboard.refresh import REFRESH_INTERVALS, remembered_refresh
from jobdesk.dashboard.state import get_state
from jobdesk.dashboard.viewer_zone import viewer_zone
from jobdesk.shared.alerts.links import AlertLink, alert_links
from jobdesk.shared.core.masking import mask_email, mask_payload, mask_text
from jobdesk.shared.operator.commands.cancellation import hard_stop_by
from jobdesk.shared.operator.queries.payload_summary import summary_pairs
from jobdesk.shared.operator.queries.totals import describe
from jobdesk.shared.operator.queries.visible_text import stack_start
from jobdesk.shared.operator.zones import abbreviation, as_utc, local_text
from jobdesk.shared.redrives.queries import redrive_progress

# C0 controls except tab and newline, DEL, C1 controls, and Unicode bidi/zero-width
# controls that can make text read differently from what it is.
_INVISIBLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]"
)


def visible_controls(text: object) -> str:
    """Control characters shown as `\\x07` / `\\u202e` instead of acting on the page."""
    if text is None:
        return ""
    value = str(text)

    def _show(match: re.Match[str]) -> str:
        code = ord(match.group(0))
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    return _INVISIBLE.sub(_show, value)


def viewer_mask(text: object) -> str:
    """Free text (errors, keys, reasons, URLs) as the current role may see it: secrets
    masked for everyone (`token=…`, credentials — again at render time, whatever was
    stored), emails masked for viewers."""
    if text is None:
        return ""
    value = mask_text(str(text))
    return mask_email(value) if auth.is_viewer_only() else value


STACK_HIDDEN = "[stack trace hidden: operators and admins see it]"


def error_text(text: object) -> str:
    """A stored error as the current role may read it: operators get the whole text
    (the stack helps them fix the job), viewers the message without the stack — file
    paths and code lines of the server are not theirs to see."""
    value = "" if text is None else str(text)
    if auth.can("operator"):
        return value
    # Python's own header, or the frames `describe_exception` appends after the
    # "Type: message" line.
    start = stack_start(value)
    if start is None:
        return value
    head = value[:start].rstrip()
    return f"{head}\n{STACK_HIDDEN}" if head else STACK_HIDDEN


#: The list filters a job page links with, and their "same as job #N" forms.
_KEY_LINKS = {"group": ("group_key", "group_of"), "key": ("idempotency_key", "key_of")}


def jobs_sharing(job: Mapping[str, Any], kind: str) -> str:
    """The jobs list filtered to `job`'s group or idempotency key.

    The key goes into the link only when the current role sees it unmasked; otherwise
    the link names the job (`?group_of=812`), so an href never carries what the page
    masks (an email in a key for a viewer, a token for anyone)."""
    column, by_reference = _KEY_LINKS[kind]
    value = job[column]
    args: dict[str, Any] = {kind: value}
    if not isinstance(value, str) or viewer_mask(value) != value:
        args = {by_reference: job["id"]}
    return url_for("jobdesk.jobs.index", **args)


#: Identifiers up to this long are left whole: they fit on a phone's line in the cells
#: that show them (a card's full width), and the page's text stays exactly the name.
BREAKABLE_AFTER_CHARS = 32
#: Where a longer identifier may wrap: after a dot, colon, underscore or slash, the
#: places a reader expects (`webhook:user:201:event:user.created`, `report.nightly`).
_IDENTIFIER_BREAKS = re.compile(r"(?<=[.:_/])(?=[^.:_/])")


def breakable(text: object) -> str:
    """An identifier (queue, job type, key, worker id, URL) that may wrap only between
    its parts: escaped, with `<wbr>` after each `.`, `:`, `_` and `/` when it is longer
    than `BREAKABLE_AFTER_CHARS`. The CSS (`.ident`) never breaks inside a word, so a
    name is never shown as "repor|ts"."""
    value = "" if text is None else str(text)
    if len(value) <= BREAKABLE_AFTER_CHARS:
        return value
    return Markup("<wbr>").join(escape(part) for part in _IDENTIFIER_BREAKS.split(value))


def pretty_json(value: Any) -> str:
    """A JSON value masked for the current role, indented, invisible characters shown."""
    masked = mask_payload(value, mask_emails=auth.is_viewer_only())
    return visible_controls(json.dumps(masked, indent=2, ensure_ascii=False, sort_keys=True))


def ago(moment: datetime | None, now: datetime | None = None) -> str:
    if moment is None:
        return "—"
    now = now or datetime.now(UTC)
    seconds = (now - moment).total_seconds()
    future = seconds < 0
    text = duration(abs(seconds))
    return f"in {text}" if future else f"{text} ago"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    seconds = float(seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min"
    if seconds < 86400:
        return f"{seconds // 3600:.0f} h {seconds % 3600 // 60:.0f} min"
    return f"{seconds // 86400:.0f} d {seconds % 86400 // 3600:.0f} h"


def utc(moment: datetime | None) -> str:
    """The instant in UTC, as every time's title (hover) shows it."""
    return as_utc(moment).strftime("%Y-%m-%d %H:%M:%S UTC") if moment else "—"


def iso_utc(moment: datetime | None) -> str:
    """The machine-readable form for `<time datetime="…">`: ISO 8601 in UTC."""
    return as_utc(moment).strftime("%Y-%m-%dT%H:%M:%SZ") if moment else ""


def local(moment: datetime | None, now: datetime | None = None, seconds: bool = True) -> str:
    """The instant on the viewer's wall clock with the zone: "14:05:09 CET" when it is
    on the same local day as `now`, else with the date first."""
    if moment is None:
        return "—"
    return local_text(moment, viewer_zone().zone, now=now, seconds=seconds)


def local_hour(moment: datetime) -> str:
    """A chart axis label: the viewer's wall-clock time, "15:00" (no date, no zone: the
    chart names its zone once, `zone_abbreviation`)."""
    return as_utc(moment).astimezone(viewer_zone().zone).strftime("%H:%M")


def zone_abbreviation(moment: datetime | None = None) -> str:
    """The viewer's zone as it is called at `moment` (now when not given): "CET"."""
    at = as_utc(moment) if moment else datetime.now(UTC)
    return abbreviation(at.astimezone(viewer_zone().zone))


def number(value: int | float | None) -> str:
    return "—" if value is None else f"{value:,}"


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    return f"{count:,} {noun if count == 1 else plural_form or noun + 's'}"


def truncate_text(text: object, limit: int = 160) -> str:
    value = "" if text is None else str(text)
    first = value.splitlines()[0] if value.strip() else value
    shortened = first if len(first) <= limit else first[: limit - 1] + "…"
    if len(value) > len(first) and shortened == first:
        shortened += " …"
    return shortened


def payload_pairs(raw: str | None) -> list[tuple[str, str]]:
    """A list row's payload summary as the current role may see it (`viewer_mask`'s
    rules: secrets masked for everyone, emails for viewers)."""
    return summary_pairs(raw, mask_emails=auth.is_viewer_only())


def dict_without(mapping: dict[str, Any], *names: str) -> dict[str, Any]:
    return {key: value for key, value in mapping.items() if key not in names}


def links_for_alert(details: dict[str, Any] | None) -> list[AlertLink]:
    """Where an alert leads, as paths under this dashboard's mount point."""
    root = request.script_root.rstrip("/")
    return [AlertLink(link.label, root + link.path) for link in alert_links(details)]


def cancel_hard_stop_by(requested_at: datetime) -> datetime:
    """When a running job with this cancel request is stopped hard at the latest."""
    return hard_stop_by(requested_at, get_state().settings)


def trend_chart_of(trend: list[Any], label: str) -> Chart:
    return dead_trend_chart(
        trend,
        label,
        hour=local_hour,
        zone=zone_abbreviation,
        tick=lambda value: number(int(value)),
        jobs=lambda count: plural(count, "job"),
    )


def install(app: Flask) -> None:
    app.jinja_env.filters.update(
        visible=visible_controls,
        viewer_mask=viewer_mask,
        breakable=breakable,
        error_text=error_text,
        pretty_json=pretty_json,
        ago=ago,
        duration=duration,
        utc=utc,
        iso_utc=iso_utc,
        local=local,
        local_hour=local_hour,
        zone_abbreviation=zone_abbreviation,
        number=number,
        truncate_text=truncate_text,
        payload_pairs=payload_pairs,
        total_text=describe,
        dict_without=dict_without,
    )
    app.jinja_env.globals.update(
        plural=plural,
        viewer_zone=viewer_zone,
        zone_abbreviation=zone_abbreviation,
        csrf_token=csrf.token,
        can=auth.can,
        current_identity=auth.current,
        here=here,
        alert_links=links_for_alert,
        jobs_sharing=jobs_sharing,
        cancel_hard_stop_by=cancel_hard_stop_by,
        refresh_intervals=REFRESH_INTERVALS,
        remembered_refresh=remembered_refresh,
        trend_chart_of=trend_chart_of,
        redrive_progress=redrive_progress,
    )
