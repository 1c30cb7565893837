"""The `<jobdesk_id:…>` URL converter: database ids in paths, never a 500.

Werkzeug's `int` converter hands any run of digits to `int()`: `/jobs/99999999999999999999`
then overflows BIGINT in the query and a 5,000-digit id raises ValueError in the
conversion itself — both HTTP 500. This converter never fails on digits: an id that
cannot exist becomes `OUT_OF_RANGE`, and the dashboard's guard answers 400 naming the
parameter (`web.check_path_ids`) before any view or query runs.
"""

from __future__ import annotations

from typing import Any

from werkzeug.routing import BaseConverter

from jobdesk.shared.operator.filters import MAX_ID

NAME = "jobdesk_id"
#: What an id that cannot exist (0, or more than 2^63-1) converts to.
OUT_OF_RANGE = MAX_ID + 1


class IdConverter(BaseConverter):
    regex = r"[0-9]+"
    weight = 50
    part_isolating = True

    def to_python(self, value: str) -> int:
        digits = value.lstrip("0")
        if not digits or len(digits) > len(str(MAX_ID)):
            return OUT_OF_RANGE
        number = int(digits)
        return number if number <= MAX_ID else OUT_OF_RANGE

    def to_url(self, value: Any) -> str:
        return str(int(value))
