"""Password rules after NIST SP 800-63B: length, no common password, not the username,
not the service's name, not one character repeated — each refused by name."""

from __future__ import annotations

import pytest

from jobdesk import ValidationError
from jobdesk.shared.operator.passwords import (
    COMMON_PASSWORDS,
    PASSWORD_MIN_CHARS,
    check_password,
    common_passwords,
)


@pytest.mark.parametrize(
    ("password", "username", "message"),
    [
        ("password123", None, "most common passwords"),
        ("Password123", None, "most common passwords"),  # any capitalisation
        ("QWERTYUIOP", None, "most common passwords"),
        ("1q2w3e4r5t", None, "most common passwords"),
        ("iloveyou123", None, "most common passwords"),
        ("ana.lopez@example.com", "ana.lopez@example.com", "the username"),
        ("my name is OTTO-the-operator", "otto", "the username"),
        ("Jobdesk-2026-admin", None, "service's name"),
        ("aaaaaaaaaaaa", None, "repeats one or two characters"),
        ("abababababab", None, "repeats one or two characters"),
        ("short", None, f"at least {PASSWORD_MIN_CHARS}"),
    ],
)
def test_weak_passwords_are_refused_saying_why(
    password: str, username: str | None, message: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        check_password(password, username=username)
    assert caught.value.field == "password"
    assert message in caught.value.message


@pytest.mark.parametrize(
    ("password", "username"),
    [
        ("correct horse battery", "otto"),
        ("banana split in 2026", "ana"),  # a 3-letter username inside is no giveaway
        ("tram stop, seven sharp", None),
    ],
)
def test_ordinary_passphrases_pass(password: str, username: str | None) -> None:
    assert check_password(password, username=username) == password


def test_the_shipped_list_is_read_once_and_holds_only_what_the_length_rule_lets_by() -> None:
    assert COMMON_PASSWORDS.is_file()
    # Inside the package (`jobdesk/shared/operator/`), so the wheel ships it.
    assert COMMON_PASSWORDS.parent.name == "operator"
    common_passwords.cache_clear()
    assert common_passwords.cache_info().currsize == 0
    found = common_passwords()
    assert common_passwords() is found
    assert len(found) >= 1000
    assert all(len(p) >= PASSWORD_MIN_CHARS and p == p.lower() for p in found)
