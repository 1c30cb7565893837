"""The keys that seal job secrets: `JOBDESK_ENCRYPTION_KEYS`, comma-separated Fernet
keys. The first one seals; every one opens. To change keys, put the new one first, keep
the old ones until `jobdesk keys rotate` has sealed everything again with the new one,
then drop them.

Keys are never echoed: errors name a key by its position in the list.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

VARIABLE = "JOBDESK_ENCRYPTION_KEYS"
HOW_TO_MAKE_ONE = "`jobdesk keys generate` prints one"


class KeysError(ValueError):
    """`JOBDESK_ENCRYPTION_KEYS` is unset or malformed, or no key opens a value. (This
    module imports nothing else of Jobdesk: the settings check uses it.)"""


def parse_keys(raw: str, name: str = VARIABLE) -> tuple[Fernet, ...]:
    """Each comma-separated key as a `Fernet`, in order; `KeysError` naming the position
    of a bad one (never its text)."""
    parts = [part.strip() for part in raw.split(",")]
    if not any(parts):
        raise KeysError(f"{name}: no key given ({HOW_TO_MAKE_ONE})")
    found: list[Fernet] = []
    for position, part in enumerate(parts, start=1):
        try:
            found.append(Fernet(part.encode("ascii")))
        except (ValueError, UnicodeEncodeError):
            raise KeysError(
                f"{name}: key {position} of {len(parts)} is not a Fernet key (the url-safe "
                f"base64 of 32 random bytes; {HOW_TO_MAKE_ONE})"
            ) from None
    return tuple(found)


def generate_key() -> str:
    return Fernet.generate_key().decode("ascii")


class Sealer:
    """Seals with the first key, opens with any."""

    def __init__(self, keys: tuple[Fernet, ...]) -> None:
        self._keys = MultiFernet(list(keys))

    def seal(self, value: str) -> str:
        return self._keys.encrypt(value.encode("utf-8")).decode("ascii")

    def open(self, sealed: str, what: str) -> str:
        with _unopenable(what, "(sealed with a key that is no longer listed?)"):
            return self._keys.decrypt(sealed.encode("ascii")).decode("utf-8")

    def reseal(self, sealed: str, what: str) -> str:
        """The same value sealed with the first key (what `jobdesk keys rotate` does)."""
        with _unopenable(what, ": add the key that sealed it and rotate again"):
            return self._keys.rotate(sealed.encode("ascii")).decode("ascii")


@contextmanager
def _unopenable(what: str, hint: str) -> Iterator[None]:
    """No listed key opens the value: a `KeysError` naming it (never its text)."""
    try:
        yield
    except InvalidToken:
        separator = "" if hint.startswith(":") else " "
        raise KeysError(
            f"{what} cannot be opened with any key of {VARIABLE}{separator}{hint}"
        ) from None


@functools.lru_cache(maxsize=8)
def sealer_for(raw: str | None) -> Sealer:
    """The sealer for a `JOBDESK_ENCRYPTION_KEYS` value (cached: parsing is per value,
    not per job); `KeysError` when unset."""
    if not raw:
        raise KeysError(
            f"{VARIABLE} is not set: job secrets are stored only encrypted ({HOW_TO_MAKE_ONE}; "
            "the worker needs the same keys to read them)"
        )
    return Sealer(parse_keys(raw))
