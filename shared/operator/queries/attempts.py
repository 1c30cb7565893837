"""A job's attempts as a person reads them: one line each.

Each line carries when the attempt started, how long it waited after the previous one
ended (a 2/4/8/16 s backoff reads as +2 s, +4 s, +8 s, +16 s), how long it ran, its
outcome and worker, and the error's first line — or "same as attempt N" when the error
fingerprint repeats an earlier attempt's. The rest of a stored error is split into the
message's further lines and its stack, whose frames from the jobdesk package itself
(the executor, the worker loop) are folded: they are the same on every attempt and
say nothing about the handler that failed.

Pure functions over rows already read (`queries.job_detail` reads them); no SQL here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from jobdesk.shared.core.masking import fingerprint

#: A traceback frame's first line: `  File "/path/to/module.py", line 12, in handler`.
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]*)", line \d+')
#: Where the stack starts in a stored error: Python's header or the first frame line.
_STACK_START = re.compile(r'^(?:Traceback \(most recent call last\):|\s+File ")')
#: A frame's path inside an installed jobdesk package (a wheel's or sdist's site-packages):
#: the package directory, then one of its subpackages or one of its top-level modules.
_OWN_PATH = re.compile(
    r"(?:^|[/\\])jobdesk[/\\](?:(?:worker|shared|dashboard|cli|demo)[/\\].*|[^/\\]+\.py)$"
)
#: This installation's own folders: in a checkout the root folders sit beside `jobdesk/`
#: (`<checkout>/shared/core/claim.py`), a path the pattern above cannot tell from an
#: app's own `shared/` package.
_BASE = Path(__file__).resolve().parents[3]
_OWN_FOLDERS = tuple(
    f"{_BASE / name}{os.sep}" for name in ("shared", "worker", "dashboard", "jobdesk")
)


@dataclass(frozen=True, slots=True)
class StackPart:
    """A run of stack text: shown as is, or — `folded` frames of Jobdesk's own — behind
    one line that says how many there are."""

    text: str
    folded: int = 0


@dataclass(frozen=True, slots=True)
class AttemptLine:
    number: int
    outcome: str
    worker_id: str | None
    started_at: datetime | None
    finished_at: datetime
    #: Finished minus started (None when the start was not recorded).
    duration_seconds: float | None
    #: From the previous attempt's end to this one's start (None for the first).
    gap_seconds: float | None
    #: The error's first line ("Type: message"), or None.
    headline: str | None
    #: The earliest attempt whose error has the same fingerprint, when one does.
    same_as: int | None
    #: Lines of a multi-line message after the first, before any stack.
    message_rest: str
    stack: tuple[StackPart, ...]

    @property
    def at(self) -> datetime:
        return self.started_at or self.finished_at


def is_own_frame(path: str) -> bool:
    """True for a frame in the jobdesk package (not the application's or a library's)."""
    return path.startswith(_OWN_FOLDERS) or _OWN_PATH.search(path) is not None


def split_error(error: str) -> tuple[str, str, tuple[StackPart, ...]]:
    """(first line, further message lines, stack parts) of a stored error."""
    lines = error.splitlines()
    if not lines:
        return "", "", ()
    headline, rest = lines[0], lines[1:]
    start = next((i for i, line in enumerate(rest) if _STACK_START.match(line)), len(rest))
    message_rest = "\n".join(rest[:start]).strip("\n")
    return headline, message_rest, fold_stack(rest[start:])


def fold_stack(lines: list[str]) -> tuple[StackPart, ...]:
    """The stack as parts, each run of consecutive Jobdesk frames folded into one.

    A frame is its `File "…", line N` line plus the indented lines after it (the code
    line, the `^^^^` markers); any other line (a `Traceback` header, a chained
    exception's text) stays in the shown text."""
    frames: list[tuple[bool, list[str]]] = []  # (own?, lines); own=False also for plain lines
    in_frame = False  # the last entry is a frame (so indented lines belong to it)
    for line in lines:
        match = _FRAME.match(line)
        if match is not None:
            frames.append((is_own_frame(match.group("path")), [line]))
            in_frame = True
        elif in_frame and line.startswith("    "):
            frames[-1][1].append(line)
        else:
            frames.append((False, [line]))
            in_frame = False
    parts: list[StackPart] = []
    shown: list[str] = []
    own: list[str] = []
    own_count = 0
    for is_own, frame_lines in frames:
        if is_own:
            if shown:
                parts.append(StackPart("\n".join(shown)))
                shown = []
            own.extend(frame_lines)
            own_count += 1
            continue
        if own:
            parts.append(StackPart("\n".join(own), folded=own_count))
            own, own_count = [], 0
        shown.extend(frame_lines)
    if own:
        parts.append(StackPart("\n".join(own), folded=own_count))
    if shown:
        parts.append(StackPart("\n".join(shown)))
    return tuple(part for part in parts if part.text.strip())


def attempt_lines(rows: Iterable[Mapping[str, Any]]) -> list[AttemptLine]:
    """One `AttemptLine` per `job_attempts` row, in the order given (attempt order)."""
    lines: list[AttemptLine] = []
    first_with: dict[str, int] = {}
    previous_end: datetime | None = None
    for row in rows:
        error = row.get("error")
        started, finished = row.get("started_at"), row["finished_at"]
        begun = started or finished
        headline, message_rest, stack = split_error(error) if error else (None, "", ())
        # Rows written before fingerprints existed (or by plain SQL) get one computed.
        key = row.get("error_fingerprint") or fingerprint(error)
        number = int(row["attempt"])
        same_as = first_with.get(key) if key else None
        if key and same_as is None:
            first_with[key] = number
        if same_as == number:  # a released and a finished row may share a number
            same_as = None
        lines.append(
            AttemptLine(
                number=number,
                outcome=str(row["outcome"]),
                worker_id=row.get("worker_id"),
                started_at=started,
                finished_at=finished,
                duration_seconds=(finished - started).total_seconds() if started else None,
                gap_seconds=(
                    max((begun - previous_end).total_seconds(), 0.0)
                    if previous_end is not None
                    else None
                ),
                headline=headline,
                same_as=same_as,
                message_rest=message_rest,
                stack=stack,
            )
        )
        previous_end = finished
    return lines
