"""The password policy (real characters, one repeated character, the username, zxcvbn's
maintained lists of common passwords and the usual ways of dressing them up) and the
signing-secret check of production."""

from __future__ import annotations

import secrets

import pytest

from rota.core.errors import ValidationError
from rota.core.security import (
    check_password,
    common_passwords,
    exception_message,
    real_characters,
    secret_weakness,
)
from rota.services.auth import generate_password


def test_the_bundled_list_is_package_data_of_common_passwords() -> None:
    """(What the signing-secret check reads; passwords are judged by zxcvbn's lists.)"""
    common = common_passwords()
    assert len(common) > 200
    assert {"password", "123456", "qwerty", "letmein", "iloveyou"} <= common
    assert all(word == word.strip().lower() and not word.startswith("#") for word in common)


@pytest.mark.parametrize(
    ("password", "why"),
    [
        ("qwertyuiop12", "most common"),  # on the list as it is, with digits
        ("P@ssw0rd2024!", "most common"),  # swaps and decoration
        ("Summer2024!!!", "most common"),
        ("!!Letmein2025", "most common"),
        ("Changeme2024!", "most common"),
        ("iloveyou-1234", "most common"),
        ("123456789012", "most common"),
        ("monkey monkey 7", "short pattern"),
        ("abcabcabcabc", "short pattern"),
        ("hunter2hunter2", "short pattern"),
        ("abcdefghijklmn", "neighbouring"),
        ("9876543210987", "neighbouring"),
        ("asdfghjkl;'\\zxc", "neighbouring keys"),
        ("rota rota rota 2024", "short pattern"),
        ("ada ada ada ada 99", "short pattern"),
        ("benjamin1985!", "common words or names"),
        ("aaaaaaab12cd", "mostly one character"),  # 7 of 12
        ("x" * 1024, "mostly one character"),
    ],
)
def test_easy_passwords_are_refused_naming_the_field(password: str, why: str) -> None:
    with pytest.raises(ValidationError, match=why) as refused:
        check_password("ada", password, field="newPassword")
    assert refused.value.field == "newPassword"
    assert "too easy to guess" in refused.value.message


@pytest.mark.parametrize(
    "password",
    [
        "correct horse battery staple",
        "  correct horse battery staple  ",
        "e2e admin passphrase",
        "Tr0ub4dor&3-xyzzy",
        "viewer passphrase 1",
        "purple monkey dishwasher",
        "Blue-Horse-42",
        "Kx8#mPq2vL9z",
    ],
)
def test_good_passwords_pass(password: str) -> None:
    check_password("ada", password)


@pytest.mark.parametrize(
    ("password", "real"),
    [
        (" " * 11 + "a", 1),  # the report: 11 spaces and an a
        ("\t  Kx8#mPq2vL9\n", 11),  # the whitespace around it does not count
        ("Kx8#m    Pq2vL9", 12),  # a run of spaces inside counts once: 12 is enough
        ("Kx8#m\u3000Pq2vL", 11),  # any Unicode space, normalised
    ],
)
def test_length_counts_real_characters(password: str, real: int) -> None:
    assert len(real_characters(password)) == real
    if real < 12:
        with pytest.raises(ValidationError, match=f"at least 12 characters.*it has {real}") as e:
            check_password("ada", password, field="newPassword")
        assert e.value.field == "newPassword"
        assert "spaces" in e.value.message
    else:
        check_password("ada", password)


def test_the_generated_passwords_pass() -> None:
    """What `rota dev` prints (and `rota user … --generate`)."""
    for _ in range(300):
        check_password("admin", generate_password())


def test_random_passwords_pass() -> None:
    for _ in range(300):
        check_password("ada", secrets.token_urlsafe(12))


def test_length_is_checked_first() -> None:
    with pytest.raises(ValidationError, match="at least 12"):
        check_password("ada", "Xk3!")


def test_secret_weakness_explains_itself() -> None:
    assert secret_weakness(b"x" * 31) == "it has 31 bytes; it needs at least 32"
    assert secret_weakness(b"x" * 31, length_only=True) is not None
    assert secret_weakness(b"a" * 40, length_only=True) is None
    assert secret_weakness(b"a" * 40) == "it repeats a short pattern"
    assert secret_weakness(secrets.token_urlsafe(48).encode()) is None


def test_exception_message_cuts_the_traceback() -> None:
    text = 'ValueError: bad\nTraceback (most recent call last):\n  File "x.py", line 1\n'
    assert exception_message(text) == "ValueError: bad"
    assert exception_message("RuntimeError: no frames") == "RuntimeError: no frames"
    assert exception_message(None) is None
