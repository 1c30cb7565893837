"""The settings schema: how dataclass fields become `JOBDESK_*` variables.

A settings class declares each field with `setting(default, doc, …)` (or
`section(SubSettings, prefix)` for a nested group such as the alert rules); this module
derives from those declarations, and from the field types, everything else:

- the variable name: `JOBDESK_` + section prefixes + the field name, upper-cased;
- the parser: `bool`, `int`, `float` (seconds when the name ends in `_seconds`),
  `str`, a choice, a list, a `Rate`, a `Path`, "days or never";
- strictness: an unknown `JOBDESK_*` name is an error naming the closest known one,
  because a misspelt variable silently ignored is worse than none;
- the reference tables in the README (`reference_markdown`).
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from jobdesk.shared.settings.parsing import (
    NEVER,
    Rate,
    SettingsError,
    parse_bool,
    parse_int,
    parse_list,
    parse_number,
    parse_seconds,
)

PREFIX = "JOBDESK_"
_SPEC = "jobdesk.setting"
_SECTION = "jobdesk.section"
T = TypeVar("T")

Check = Callable[[str, Any], None]


@dataclass(frozen=True, slots=True)
class Spec:
    """What a field means and which values it accepts (beyond its type)."""

    doc: str
    group: str = ""
    minimum: float | None = None
    maximum: float | None = None
    #: Zero is refused even though the minimum is 0 (intervals, windows).
    positive: bool = False
    choices: tuple[str, ...] = ()
    #: "Days" settings: `never`/`off`/… mean None (keep forever).
    never: bool = False
    #: How the README shows a computed or absent default (e.g. "max(2, slots)").
    shown_default: str | None = None
    check: Check | None = None


def setting(
    default: Any,
    doc: str,
    *,
    group: str = "",
    minimum: float | None = None,
    maximum: float | None = None,
    positive: bool = False,
    choices: tuple[str, ...] = (),
    never: bool = False,
    shown_default: str | None = None,
    check: Check | None = None,
) -> Any:
    """A dataclass field that is also a `JOBDESK_*` variable."""
    spec = Spec(doc, group, minimum, maximum, positive, choices, never, shown_default, check)
    return field(default=default, metadata={_SPEC: spec})


def section(cls: type[T], prefix: str, group: str) -> T:
    """A nested settings class whose variables are `JOBDESK_<PREFIX>_<FIELD>`."""
    value: T = field(default_factory=cls, metadata={_SECTION: (prefix, group)})
    return value


@dataclass(frozen=True, slots=True)
class Entry:
    """One variable of the schema."""

    name: str
    path: tuple[str, ...]
    kind: Any
    spec: Spec
    default: Any

    def parse(self, raw: str) -> Any:
        return _parse(self, raw)


_HINTS: dict[type[Any], dict[str, Any]] = {}


def _hints(cls: type[Any]) -> dict[str, Any]:
    """The resolved annotations of a settings class, once per class: resolving them
    evaluates every annotation string, the bulk of reading the settings."""
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints


def entries(cls: type[Any], prefix: str = "", path: tuple[str, ...] = ()) -> Iterator[Entry]:
    """Every variable of `cls`, sections included, in declaration order."""
    hints = _hints(cls)
    for item in fields(cls):
        if _SECTION in item.metadata:
            sub_prefix, _group = item.metadata[_SECTION]
            yield from entries(hints[item.name], f"{prefix}{sub_prefix}_", (*path, item.name))
            continue
        spec = item.metadata.get(_SPEC)
        if spec is None:
            continue
        yield Entry(
            f"{PREFIX}{prefix}{item.name}".upper(),
            (*path, item.name),
            hints[item.name],
            spec,
            item.default,
        )


def groups(cls: type[Any]) -> dict[str, str]:
    """Section path → its group title (for sections whose fields carry no group)."""
    out: dict[str, str] = {}
    hints = _hints(cls)
    for item in fields(cls):
        if _SECTION in item.metadata:
            out[item.name] = item.metadata[_SECTION][1]
            for sub, title in groups(hints[item.name]).items():
                out[f"{item.name}.{sub}"] = title
    return out


class UnknownSettingWarning(UserWarning):
    """A `JOBDESK_*` variable that is no Jobdesk setting, in a process that reads its
    settings on demand (an app that enqueues) instead of refusing to start."""


def load(cls: type[T], environ: Mapping[str, str], known_elsewhere: Mapping[str, str]) -> T:
    """Build `cls` from the `JOBDESK_*` variables of `environ`; anything unknown or
    malformed raises `SettingsError` naming the variable."""
    by_name = {entry.name: entry for entry in entries(cls)}
    unknown = unknown_names(environ, by_name.keys() | known_elsewhere.keys())
    if unknown:
        raise SettingsError(unknown_name_message(unknown[0], [*by_name, *known_elsewhere]))
    values: dict[tuple[str, ...], Any] = {}
    for key in sorted(environ):
        entry = by_name.get(key)
        if entry is not None:
            values[entry.path] = entry.parse(environ[key])
    return _build(cls, values, ())


def unknown_names(environ: Iterable[str], known: Container[str]) -> list[str]:
    """The `JOBDESK_*` names of `environ` that are not `known`, sorted: what `load`
    refuses, and what an app that enqueues is warned about (`model.unknown_variables`)."""
    return sorted(key for key in environ if key.startswith(PREFIX) and key not in known)


def unknown_name_message(key: str, known: list[str]) -> str:
    # Compared without the shared prefix, which would make every name look alike.
    suffixes = {name.removeprefix(PREFIX): name for name in known}
    close = difflib.get_close_matches(key.removeprefix(PREFIX), list(suffixes), n=1, cutoff=0.6)
    hint = (
        f"did you mean {suffixes[close[0]]}?" if close else "see `jobdesk settings` for every name"
    )
    return f"{key} is not a Jobdesk setting; {hint}"


def _build(cls: type[T], values: Mapping[tuple[str, ...], Any], path: tuple[str, ...]) -> T:
    assert dataclasses.is_dataclass(cls)
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for item in fields(cls):
        here = (*path, item.name)
        if _SECTION in item.metadata:
            if any(key[: len(here)] == here for key in values):
                kwargs[item.name] = _build(hints[item.name], values, here)
        elif here in values:
            kwargs[item.name] = values[here]
    return cls(**kwargs)


# --- parsing by type --------------------------------------------------------------------


def _optional(kind: Any) -> tuple[Any, bool]:
    args = typing.get_args(kind)
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        rest = [arg for arg in args if arg is not type(None)]
        return rest[0], len(rest) < len(args)
    return kind, False


def _parse(entry: Entry, raw: str) -> Any:
    name, spec = entry.name, entry.spec
    kind, optional = _optional(entry.kind)
    text = raw.strip()
    if optional and not text:
        return None
    if spec.never and text.lower() in NEVER:
        return None
    value: Any
    if kind is bool:
        value = parse_bool(name, raw)
    elif kind is int:
        value = parse_int(name, raw, int(spec.minimum or 0))
    elif kind is float:
        if name.endswith("_SECONDS"):
            value = parse_seconds(name, raw)
        else:
            what = "a number of days or 'never'" if spec.never else "a number"
            value = parse_number(name, raw, what=what)
        if spec.minimum is not None and value < spec.minimum:
            raise SettingsError(f"{name}: must be >= {spec.minimum:g}, got {raw!r}")
    elif kind is Rate:
        value = Rate.parse(text, name)
    elif kind is Path:
        value = Path(text)
    elif typing.get_origin(kind) is tuple:
        value = parse_list(raw)
    elif spec.choices:
        value = text.lower()
        if value not in spec.choices:
            raise SettingsError(f"{name}: expected one of {', '.join(spec.choices)}, got {raw!r}")
    else:
        value = raw if kind is str and not spec.check else text
    if spec.positive and value == 0:
        raise SettingsError(f"{name}: must be > 0, got {raw!r}")
    if spec.maximum is not None and value > spec.maximum:
        raise SettingsError(f"{name}: must be <= {spec.maximum:g}, got {raw!r}")
    if spec.check is not None:
        spec.check(name, value)
    return value


# --- documentation ----------------------------------------------------------------------


def shown_default(entry: Entry) -> str:
    if entry.spec.shown_default is not None:
        return entry.spec.shown_default
    value = entry.default
    if value is None or value in ("", ()):
        return "—"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    return f"`{value}`"


def reference_markdown(
    cls: type[Any], known_elsewhere: Mapping[str, str], external_group: str
) -> str:
    """The README's settings tables: one per group, every variable once."""
    titles = groups(cls)
    tables: dict[str, list[str]] = {}
    for entry in entries(cls):
        group = entry.spec.group or titles.get(".".join(entry.path[:-1]), "")
        if not group:
            # A rule parameter inside a nested section: the section of its section.
            group = titles.get(entry.path[0], "Other")
        tables.setdefault(group, []).append(
            f"| `{entry.name}` | {shown_default(entry)} | {entry.spec.doc} |"
        )
    tables[external_group] = [f"| `{name}` | — | {doc} |" for name, doc in known_elsewhere.items()]
    out: list[str] = []
    for title, rows in tables.items():
        out += [f"**{title}**", "", "| variable | default | meaning |", "|---|---|---|", *rows, ""]
    return "\n".join(out).rstrip() + "\n"


def replace_at(settings: T, path: str, value: Any) -> T:
    """`settings` with the field at dotted `path` replaced (sections are frozen too)."""
    head, _, rest = path.partition(".")
    if not rest:
        return dataclasses.replace(settings, **{head: value})  # type: ignore[type-var]
    inner = replace_at(getattr(settings, head), rest, value)
    return dataclasses.replace(settings, **{head: inner})  # type: ignore[type-var]
