"""JSON text typed by a person (the fix form, the CLI), read strictly and within bounds.

`json.loads` alone turns `1e400` into infinity, accepts `NaN`, and raises a bare
ValueError ("Exceeds the limit (4300 digits) for integer string conversion") for a long
integer — an HTTP 500 where a 400 naming the field belongs. Here:

- integers must fit in a signed 64-bit integer (-2^63 … 2^63-1), what the database
  and most consumers of a payload hold; literals longer than that are refused before
  Python converts them (the conversion of a huge literal is itself slow);
- numbers must be finite (`1e400`, `NaN`, `Infinity` refused);
- every problem is a `ValidationError` naming the field and, for values inside the
  document, the path (`payload.items[2].qty`).

`check_json_numbers` applies the same number rules to an already decoded value.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from jobdesk.shared.core.errors import ValidationError

INT_MIN = -(2**63)
INT_MAX = 2**63 - 1
#: Longest integer literal looked at: "-9223372036854775808" is 20 characters.
_MAX_INT_CHARS = 20


def loads_json_text(field: str, text: str) -> Any:
    """Parse `text`; raises ValidationError(field, …) for anything not accepted."""

    def _int(literal: str) -> int:
        if len(literal.lstrip("-")) > _MAX_INT_CHARS - 1:
            raise ValidationError(
                field,
                f"contains a {len(literal.lstrip('-')):,}-digit integer; integers must fit "
                f"in 64 bits ({INT_MIN} to {INT_MAX})",
            )
        return int(literal)

    def _float(literal: str) -> float:
        value = float(literal)
        if math.isinf(value):
            raise ValidationError(
                field, f"number {literal[:40]} is too large (it would become infinity)"
            )
        return value

    def _constant(name: str) -> Any:
        raise ValidationError(field, f"{name} is not allowed in JSON")

    try:
        value = json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except json.JSONDecodeError as exc:
        raise ValidationError(
            field, f"is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        raise ValidationError(field, "is nested too deeply") from None
    check_json_numbers(value, field)
    return value


def check_json_numbers(value: Any, path: str) -> None:
    """Refuse integers outside the 64-bit range and non-finite floats, naming the path."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, bool) or item is None or isinstance(item, str):
            continue
        if isinstance(item, int):
            if not INT_MIN <= item <= INT_MAX:
                raise ValidationError(
                    where,
                    f"integer out of range; integers must fit in 64 bits ({INT_MIN} to {INT_MAX})",
                )
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise ValidationError(where, f"{item} is not allowed in JSON (NaN/Infinity)")
        elif isinstance(item, Mapping):
            stack.extend((child, f"{where}.{key}") for key, child in item.items())
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{where}[{index}]") for index, child in enumerate(item))
