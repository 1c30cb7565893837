"""What a dashboard account's password may be, after NIST SP 800-63B (section 5.1.1.2):

- 10 to 1,024 characters, any characters but NUL — no composition rules and no expiry,
  which the guideline advises against;
- not one of the most common passwords (`common_passwords.txt`, the most common ones of
  10 or more characters, compared ignoring case; read once, on first use);
- not the username or a password containing it, ignoring case (a username of fewer
  than `USERNAME_MIN_CHARS` characters is too short to be a giveaway: `ana` is in
  `banana-split-2026`), nor the service's name (`jobdesk`);
- not one or two characters repeated (`aaaaaaaaaa`, `abababababab`).

Each refusal is a `ValidationError` on the `password` field that says which rule.
"""

from __future__ import annotations

import functools
from pathlib import Path

from jobdesk.shared.core.errors import ValidationError

PASSWORD_MIN_CHARS = 10
PASSWORD_MAX_CHARS = 1024
USERNAME_MIN_CHARS = 4
#: The service's own name: the first word a guesser tries with it.
SERVICE_NAME = "jobdesk"
COMMON_PASSWORDS = Path(__file__).with_name("common_passwords.txt")


@functools.cache
def common_passwords() -> frozenset[str]:
    """The shipped list of common passwords, lower-cased (read on first use)."""
    lines = COMMON_PASSWORDS.read_text(encoding="utf-8").splitlines()
    return frozenset(
        line.strip().lower() for line in lines if line.strip() and not line.startswith("#")
    )


def check_password(password: object, *, username: str | None = None) -> str:
    """`password` when it may be used (for the account `username`, when given), else a
    ValidationError naming the rule it breaks."""
    if not isinstance(password, str):
        raise ValidationError("password", "must be text")
    if len(password) < PASSWORD_MIN_CHARS:
        raise ValidationError("password", f"must be at least {PASSWORD_MIN_CHARS} characters")
    if len(password) > PASSWORD_MAX_CHARS:
        raise ValidationError("password", f"must be at most {PASSWORD_MAX_CHARS} characters")
    if "\x00" in password:
        raise ValidationError("password", "must not contain NUL")
    folded = password.lower()
    if len(set(folded)) <= 2:
        raise ValidationError(
            "password", "repeats one or two characters; choose one that is harder to guess"
        )
    if folded in common_passwords():
        raise ValidationError(
            "password",
            "is one of the most common passwords, among the first an attacker tries; "
            "choose another (a few unrelated words make a good one)",
        )
    name = (username or "").lower()
    if len(name) >= USERNAME_MIN_CHARS and name in folded:
        raise ValidationError("password", "must not contain the username")
    if SERVICE_NAME in folded:
        raise ValidationError("password", f"must not contain the service's name ({SERVICE_NAME})")
    return password
