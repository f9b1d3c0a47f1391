"""Users, roles, refresh tokens, audit entries and the password policy (pure domain, no I/O)."""

from __future__ import annotations

import enum
import functools
import itertools
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from typing import TYPE_CHECKING, Any, Final
from uuid import UUID

from rota.core.errors import ValidationError

if TYPE_CHECKING:
    from rota.core.apikeys import KeyScope


class Role(enum.StrEnum):
    """What a user may do. Ordered: ``Viewer < Operator < Admin``; a higher role may do all a
    lower one may."""

    VIEWER = "Viewer"
    OPERATOR = "Operator"
    ADMIN = "Admin"

    @property
    def rank(self) -> int:
        return _RANKS[self]

    def allows(self, needed: Role) -> bool:
        """A user of this role may call what ``needed`` may."""
        return self.rank >= needed.rank

    @classmethod
    def parse(cls, value: str) -> Role:
        """``admin``, ``Admin`` or ``ADMIN`` -> :attr:`ADMIN`; anything else is refused."""
        for role in cls:
            if role.value.lower() == value.strip().lower():
                return role
        names = ", ".join(r.value for r in cls)
        raise ValidationError(f"unknown role {value!r} (one of {names})", field="role")


_RANKS: Final = {Role.VIEWER: 0, Role.OPERATOR: 1, Role.ADMIN: 2}


@dataclass(frozen=True, slots=True, kw_only=True)
class User:
    id: UUID
    username: str
    password_hash: str = field(repr=False)
    """Never in a ``repr``, so never in a log line."""
    role: Role
    is_active: bool = True
    failed_logins: int = 0
    """Consecutive failed logins since the last success or lock."""
    locked_until: datetime | None = None
    created_at: datetime
    updated_at: datetime
    tokens_valid_after: datetime | None = None
    """Access tokens issued at or before this instant are refused (a password change or
    reset, a role change, a deactivation ended them); set only through
    :class:`~rota.core.ports.sessions.SessionStore`, never moved back."""

    def locked(self, now: datetime) -> bool:
        return self.locked_until is not None and self.locked_until > now


@dataclass(frozen=True, slots=True, kw_only=True)
class RefreshToken:
    """A stored refresh token: only the SHA-256 of the opaque token is kept.

    Every refresh uses a token up and issues its successor in the same ``family_id`` (one
    login); presenting a used or revoked token again revokes the whole family."""

    token_hash: str
    family_id: UUID
    user_id: UUID
    issued_at: datetime
    expires_at: datetime
    used_at: datetime | None = None
    revoked_at: datetime | None = None


class RefreshStatus(enum.StrEnum):
    ROTATED = "rotated"
    """The token was live: it is used up now and its successor is stored."""
    REUSED = "reused"
    """The token was used or revoked before: its family is revoked now."""
    INVALID = "invalid"
    """Unknown or expired; nothing changed."""


@dataclass(frozen=True, slots=True)
class RefreshOutcome:
    status: RefreshStatus
    user_id: UUID | None = None


class LoginGate(enum.StrEnum):
    """What the store answered to a sign-in's reservation (see ``Store.reserve_login``)."""

    GRANTED = "granted"
    """The attempt is counted as a failure already and its check leased: check the password."""
    LOCKED = "locked"
    """Too many failures: the name is locked until ``until``."""
    BUSY = "busy"
    """Another check of the name is in flight (its lease ends at ``until``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LoginReservation:
    gate: LoginGate
    user: User | None = None
    """The user of the name (as stored after the reservation); ``None`` for a name that is no
    user."""
    until: datetime | None = None
    """LOCKED: when the lock ends. BUSY: when the other check's lease ends."""
    locks: bool = False
    """GRANTED: this attempt was the last one allowed; unless it succeeds, the name is locked
    (until ``until``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEntry:
    """One change: who (``actor``, a username), what (``action`` on a resource), when, and the
    state before and after (JSON; ``None`` when there is none)."""

    id: UUID
    at: datetime
    actor: str
    action: str
    resource_type: str
    resource_id: str | None = None
    before: Any = None
    after: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditQuery:
    actor: str | None = None
    action: str | None = None
    resource_type: str | None = None
    resource_id: str | None = None
    after: datetime | None = None
    """``after <= at``."""
    before: datetime | None = None
    """``at < before``."""
    limit: int = 50
    cursor: str | None = None
    """Entries are ordered newest first (by id, a UUIDv7)."""


# --- password policy -----------------------------------------------------------------------

MIN_PASSWORD_LENGTH: Final = 12
MAX_PASSWORD_LENGTH: Final = 1024
COMMON_PASSWORDS_FILE: Final = "common-passwords.txt"
"""Package data of ``rota.core``: the most common passwords and the words they are made of,
for the signing-secret check (:func:`secret_weakness`); passwords are judged by zxcvbn's
maintained lists (:func:`password_weakness`)."""

USERNAME_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}$"

_LEET: Final = str.maketrans("0134578@$!|", "oieastbasil")
_WORDS: Final = re.compile(r"[a-z]+")


@functools.cache
def common_passwords() -> frozenset[str]:
    """The bundled list (read once, on first use)."""
    text = resources.files("rota.core").joinpath("data", COMMON_PASSWORDS_FILE).read_text("utf-8")
    lines = (line.strip().lower() for line in text.splitlines())
    return frozenset(line for line in lines if line and not line.startswith("#"))


def _period(text: str) -> int:
    """The length of the shortest unit ``text`` repeats (its own length if none)."""
    for size in range(1, len(text) // 2 + 1):
        if len(text) % size == 0 and text[:size] * (len(text) // size) == text:
            return size
    return len(text)


def _sequential(text: str) -> bool:
    """Mostly a run of neighbouring characters: ``abcdefgh``, ``987654321``, ``13579``…"""
    if len(text) < 4:
        return False
    steps = [ord(b) - ord(a) for a, b in itertools.pairwise(text)]
    regular = sum(1 for a, b in itertools.pairwise(steps) if a == b and abs(a) <= 2)
    return regular >= 0.7 * (len(steps) - 1)


MIN_PASSWORD_SCORE: Final = 4
"""The least zxcvbn score a password needs (0-4; 4: an estimated 10^10 guesses or more, about
30 core-years of argon2id; 3 would let ``Summer2024!!!`` and ``Changeme2024!`` through)."""
ZXCVBN_MAX_LENGTH: Final = 72
"""zxcvbn judges at most this many characters (its own limit): a longer password is judged by
its first 72, which must already be hard to guess."""

_REASONS: Final = {
    "passwords": "it is one of the most common passwords, or made of them",
    "user_inputs": "it is made of the username or the name Rota",
    "repeat": "it repeats a short pattern",
    "sequence": "it is a run of neighbouring characters",
    "spatial": "it is a pattern of neighbouring keys",
    "date": "it is mostly a date",
    "regex": "it is mostly a year",
}
_WORDS_REASON: Final = "it is made of common words or names"


def real_characters(password: str) -> str:
    """``password`` as its characters are counted: Unicode-normalised (NFKC), without the
    whitespace around it, every run of whitespace inside it one space."""
    return " ".join(unicodedata.normalize("NFKC", password).split())


def password_weakness(password: str, username: str = "") -> str | None:
    """Why ``password`` is easy to guess (``None``: it is not, as far as this check sees).

    Judged by zxcvbn (the ``zxcvbn`` package: the most common passwords of its maintained
    frequency lists, English words, names, keyboard patterns, repeats, runs, dates, the usual
    letter-for-digit swaps and decorations, and ``username``): refused under
    :data:`MIN_PASSWORD_SCORE`, the reason named after its weakest part."""
    from zxcvbn import zxcvbn

    inputs = [name for name in (username, "rota") if name]
    result = zxcvbn(password[:ZXCVBN_MAX_LENGTH], user_inputs=inputs)
    if result["score"] >= MIN_PASSWORD_SCORE:
        return None
    weakest = "words"
    longest = 0
    for match in result["sequence"]:
        pattern = str(match.get("pattern"))
        kind = str(match.get("dictionary_name")) if pattern == "dictionary" else pattern
        size = len(str(match.get("token", "")))
        if kind != "bruteforce" and (size > longest or (kind == "passwords" and size == longest)):
            weakest, longest = kind, size
    return _REASONS.get(weakest, _WORDS_REASON)


def check_password(username: str, password: str, *, field: str = "password") -> None:
    """Refuse a password that breaks the policy: at least 12 characters not counting the
    whitespace around it or repeated inside it (:func:`real_characters`; at most 1024 in
    all), not mostly one character, not (mostly) the username, not easy to guess
    (:func:`password_weakness`). The error names ``field`` and says why."""
    if len(password) > MAX_PASSWORD_LENGTH:
        raise ValidationError(
            f"the password must have at most {MAX_PASSWORD_LENGTH} characters", field=field
        )
    real = real_characters(password)
    if len(real) < MIN_PASSWORD_LENGTH:
        raise ValidationError(
            f"the password must have at least {MIN_PASSWORD_LENGTH} characters, not counting "
            f"the spaces around it or repeated spaces (it has {len(real)})",
            field=field,
        )
    if Counter(real).most_common(1)[0][1] * 2 > len(real):
        raise ValidationError(
            "the password is too easy to guess: it is mostly one character repeated",
            field=field,
        )
    lowered = real.lower()
    if username and username.lower() in lowered and len(username) * 2 > len(real):
        raise ValidationError("the password must not be (mostly) the username", field=field)
    weakness = password_weakness(real, username)
    if weakness is not None:
        raise ValidationError(
            f"the password is too easy to guess: {weakness}; use a long passphrase of "
            "unrelated words or a password manager's random password",
            field=field,
        )


# --- signing secrets -------------------------------------------------------------------------

MIN_SECRET_BYTES: Final = 32
MIN_SECRET_BITS: Final = 80
"""The least entropy a signing secret may show (estimated from its characters: a random hex
secret of 32 characters, 128 bits, shows 95-125; ``"a" * 40`` none)."""


def estimated_bits(secret: bytes) -> float:
    """Shannon entropy of the secret's bytes times its length: an upper estimate of what a
    guesser must try (a random base64 secret of 64 characters shows about 330 bits)."""
    counts = Counter(secret)
    total = len(secret)
    return -total * sum(n / total * math.log2(n / total) for n in counts.values())


def secret_weakness(secret: bytes, *, length_only: bool = False) -> str | None:
    """Why ``secret`` is too weak to sign tokens (``None``: strong enough): shorter than 32
    bytes, or (unless ``length_only``) a short unit repeated, a run of neighbouring
    characters, made mostly of common words, or under :data:`MIN_SECRET_BITS` of estimated
    entropy."""
    if len(secret) < MIN_SECRET_BYTES:
        return f"it has {len(secret)} bytes; it needs at least {MIN_SECRET_BYTES}"
    if length_only:
        return None
    text = secret.decode("latin-1")
    if _period(text) <= len(text) // 2:
        return "it repeats a short pattern"
    if _sequential(text):
        return "it is a run of neighbouring characters"
    words = _WORDS.findall(text.lower().translate(_LEET))
    letters = sum(len(w) for w in words)
    known = sum(len(w) for w in words if len(w) > 2 and w in common_passwords())
    if letters * 2 >= len(text) and known * 2 >= letters:
        return "it is made of common words"
    bits = estimated_bits(secret)
    if bits < MIN_SECRET_BITS:
        return f"it shows only about {bits:.0f} bits of entropy (at least {MIN_SECRET_BITS})"
    return None


# --- exceptions as shown -----------------------------------------------------------------------

TRACEBACK_MARK: Final = "\nTraceback (most recent call last):"
ExceptionText = Callable[[str | None], str | None]
"""How an exception text is shown to someone (whole, or :func:`exception_message`)."""


def exception_message(text: str | None) -> str | None:
    """An occurrence's exception without its traceback: the ``Type: message`` the worker
    writes before it."""
    if text is None:
        return None
    return text.split(TRACEBACK_MARK, 1)[0]


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the signed-in user as the API sees it."""

    user_id: UUID
    """The user's id; for an API key, the key's id."""
    username: str
    """The user's name; for an API key, ``key:<name>`` (what the audit log names)."""
    role: Role
    token_id: str = field(default="")
    key_id: UUID | None = None
    """Set when the caller is an API key (not a signed-in user)."""
    scope: KeyScope | None = None
    """An API key's scope (``None``: everything its role allows)."""

    @property
    def is_key(self) -> bool:
        return self.key_id is not None

    @property
    def scoped(self) -> bool:
        return self.scope is not None and self.scope.scoped
