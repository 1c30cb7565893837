"""Reading stored JSON documents (payloads, results, progress) that may be hostile.

Everything Jobdesk writes is checked on the way in (`validation`), but a row written by
plain SQL — or by an older version — may hold a document nested thousands of levels
deep or text that is not JSON at all. Decoding such a row must never take a reader
down with it (a claim batch, the job page): `decode_document` returns the value or a
problem that names what is wrong, and measures depth without recursion.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from jobdesk.shared.core.validation import MAX_DEPTH

__all__ = ["Decoded", "decode_document", "depth_of", "not_an_object"]


@dataclass(frozen=True, slots=True)
class Decoded:
    """A decoded document, or why it could not be used (then `value` is None)."""

    value: Any
    problem: str | None = None


def depth_of(value: Any, stop_after: int = MAX_DEPTH) -> int:
    """Nesting depth of objects/arrays (a scalar is 0), counted without recursion;
    stops counting past `stop_after`."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, dict | list):
            continue
        deepest = max(deepest, depth)
        if deepest > stop_after:
            break
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest


def decode_document(raw: Any, what: str = "payload") -> Decoded:
    """Decode stored JSON text (or check an already decoded value) without trusting it."""
    if raw is None:
        return Decoded(None)
    value = raw
    if isinstance(raw, str | bytes):
        try:
            value = json.loads(raw)
        except RecursionError:
            return Decoded(None, f"the stored {what} is nested too deeply to decode")
        except ValueError as exc:  # JSONDecodeError, or an integer too long to convert
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return Decoded(None, f"the stored {what} is not valid JSON: {first}")
    if depth_of(value) > MAX_DEPTH:
        return Decoded(None, f"the stored {what} is nested more than {MAX_DEPTH} levels deep")
    return Decoded(value)


def not_an_object(value: Any, what: str = "payload") -> str:
    """The problem with a decoded document that had to be a JSON object and is not."""
    if value is None:
        kind = "JSON null"
    elif isinstance(value, bool):
        kind = "a JSON boolean"
    elif isinstance(value, int | float):
        kind = "a JSON number"
    elif isinstance(value, str):
        kind = "a JSON string"
    elif isinstance(value, list):
        kind = "a JSON array"
    else:
        kind = f"a {type(value).__name__}"
    return f"the stored {what} is {kind}, not a JSON object"
