"""Settings: every `JOBDESK_*` variable, its type, default and meaning, in one schema.

- `model`: the `Settings` dataclass (the whole schema, with the alert and retention
  sections from `alerts` and `retention`);
- `schema`: how fields become variables (names, parsers, the unknown-name check, the
  README tables);
- `parsing`: the parsers for one value.

This package imports nothing else of Jobdesk: the core, the operator side and every
feature read their settings from here.
"""

from jobdesk.shared.settings.model import (
    DEFAULT_DATABASE_URL,
    KNOWN_ELSEWHERE,
    Settings,
    known_names,
    settings_reference,
    settings_rows,
    unknown_variables,
)
from jobdesk.shared.settings.parsing import (
    Rate,
    SettingsError,
    parse_bool,
    parse_int,
    parse_list,
    parse_number,
    parse_seconds,
)
from jobdesk.shared.settings.schema import PREFIX, UnknownSettingWarning

__all__ = [
    "DEFAULT_DATABASE_URL",
    "KNOWN_ELSEWHERE",
    "PREFIX",
    "Rate",
    "Settings",
    "SettingsError",
    "UnknownSettingWarning",
    "known_names",
    "parse_bool",
    "parse_int",
    "parse_list",
    "parse_number",
    "parse_seconds",
    "settings_reference",
    "settings_rows",
    "unknown_variables",
]
