"""Which names say that their value is a secret: payload keys and `name=` in free text.

Two vocabularies, because the two sources differ:

- `is_secret_key` — keys of JSON documents (payloads, log extras). A key is a
  deliberate label, so it is read broadly: a secret word anywhere in it (`password`,
  `db_pass`, `clientSecret`, `session`, `cookie`, `card_number`, …), or one of its
  words (split at `_ - . space` and camelCase) is `pwd`, `pin`, `otp`/`totp`/`hotp`;
  the last word is `auth` (`auth`, `basic_auth`); the key is `key`, `sig`, `cvv`,
  `cvc` or `ssn`; or its last word is `key` after a word naming a credential
  (`encryption_key`, `license_key`, `hmac_key`). A `key` of bookkeeping stays visible:
  `idempotency_key`, `group_key`, `concurrency_key`, `sort_key`, `monkey`, `keyboard`.
- `is_credential_name` — names in front of `=`/`:` inside free text (errors, response
  bodies, log lines), where ordinary words also meet a colon: only names that carry a
  credential word (`client_secret`, `X-Api-Key`, `AWS_SECRET_ACCESS_KEY`, `access_token`
  but not `tokens_left`, `passphrase`, `signature`) or are one of `key sig pwd auth pin
  otp` whole. `cookie`/`set-cookie` are credential names whose value is the rest of
  the line (`credential_kind` says `WHOLE_LINE`).

Both are linear in the length of the name (the text rules only ever pass names of at
most `MAX_NAME_CHARS` characters).
"""

from __future__ import annotations

import functools
import re

#: The longest `name` in `name=value` free text that is looked at (long environment
#: variable names included).
MAX_NAME_CHARS = 100

_SECRET_KEY_WORDS = re.compile(
    r"pass(?:word|wd|phrase)?|secret|token|authorization|api[_-]?key|access[_-]?key|"
    r"private[_-]?key|signing[_-]?key|credential|signature|card[_-]?number|session|cookie",
    re.IGNORECASE,
)
#: Keys that are a secret on their own (compared lower-cased, whole).
_SECRET_KEYS_WHOLE = frozenset({"key", "sig", "cvv", "cvc", "ssn"})
#: Words that make a key secret wherever they stand in it.
_SECRET_KEY_PARTS = frozenset({"pwd", "pin", "otp", "totp", "hotp"})
#: Words after which a final `key` names a credential (`encryption_key`, `appKey`).
_KEY_QUALIFIERS = frozenset(
    {
        "account",
        "api",
        "app",
        "auth",
        "client",
        "decryption",
        "encryption",
        "gpg",
        "hmac",
        "license",
        "licence",
        "master",
        "pgp",
        "service",
        "shared",
        "ssh",
        "webhook",
    }
)
# Words of a key: runs of capitals not followed by a small letter (`API` in `APIKey`),
# a capitalised or small word, digits. Each alternative consumes what it matches, so
# `findall` is one pass over the key.
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def key_words(key: str) -> list[str]:
    """`"client_apiKey-2"` → `["client", "api", "key", "2"]` (lower-cased)."""
    return [word.lower() for word in _WORD.findall(key)]


def is_secret_key(key: str) -> bool:
    """True when the value under this JSON key is to be masked (see the module)."""
    if _SECRET_KEY_WORDS.search(key):
        return True
    words = key_words(key)
    if not words:
        return False
    if key.strip().lower() in _SECRET_KEYS_WHOLE or words == ["key"]:
        return True
    if not _SECRET_KEY_PARTS.isdisjoint(words) or words[-1] == "auth":
        return True
    return len(words) >= 2 and words[-1] == "key" and words[-2] in _KEY_QUALIFIERS


_CREDENTIAL_WORDS = re.compile(
    r"secret|token(?!s)|passw(?:or)?d|passphrase|api[_-]?key|access[_-]?key|private[_-]?key|"
    r"signing[_-]?key|client[_-]?key|credentials?|signature",
    re.IGNORECASE,
)
_CREDENTIAL_WHOLE = frozenset({"key", "sig", "pwd", "auth", "pin", "otp"})
_WHOLE_LINE_NAMES = frozenset({"cookie", "set-cookie"})
#: `credential_kind` of a name whose value is a single value.
VALUE = "value"
#: `credential_kind` of a header whose whole value is a list of credentials (cookies).
WHOLE_LINE = "line"


@functools.lru_cache(maxsize=4096)
def credential_kind(name: str) -> str | None:
    """`VALUE` or `WHOLE_LINE` when `name=value` / `name: value` in free text carries a
    credential, None when it does not. (Cached: a text repeats its names.)"""
    if len(name) > MAX_NAME_CHARS:
        return None
    lowered = name.lower()
    if lowered in _WHOLE_LINE_NAMES:
        return WHOLE_LINE
    if lowered in _CREDENTIAL_WHOLE or _CREDENTIAL_WORDS.search(name):
        return VALUE
    return None


def is_credential_name(name: str) -> bool:
    """True when `name=value` / `name: value` in free text carries a credential."""
    return credential_kind(name) is not None
