"""Job data and results sealed at rest: AES-GCM (``cryptography``) under versioned keys.

A sealed value is an envelope in place of the JSON value: ``{"$enc": "<version>:<base64>"}``,
the base64 of a 12-byte random nonce followed by the ciphertext and its 16-byte tag. The
plaintext is the value's JSON. The associated data binds the envelope to what it belongs to
(:func:`job_data_aad`, :func:`result_aad`, :func:`failed_data_aad`): an envelope copied to
another job or occurrence does not open. ``None`` is never sealed (there is nothing to hide).

:class:`DataSeal` holds the keys: every version opens, the current one (the first listed
unless named; none: decrypt-only) seals. ``cryptography`` is imported only when keys are set,
so a deployment without encryption needs no such package.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from uuid import UUID

import orjson
from msgspec.structs import replace

from rota.core.errors import ConfigurationError
from rota.core.models import JobMessage, JsonValue, StatusRecord

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

ENVELOPE_KEY = "$enc"
"""The one key of a sealed value's object."""
KEYS_SETTING = "ROTA_ENCRYPTION__KEYS"
REENCRYPT_TABLES = ("jobs", "job_versions", "occurrences", "failed_occurrences", "audit_entries")
"""The tables that hold sealed values (``rota maintenance reencrypt --table``)."""
_VERSION = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
_NONCE = 12
_BYTES_MARK = b"$enc:"
_KEY_BYTES = 32


class SealError(Exception):
    """A sealed value cannot be opened: unknown key version, wrong key, altered ciphertext or
    associated data, or a malformed envelope. The message names no key."""


class KeySettingError(ConfigurationError):
    """The keys setting is malformed; the message names the setting, never a key."""


def job_data_aad(job_id: UUID) -> bytes:
    """Associated data of a job's data: the job's, its versions', its occurrences'."""
    return b"rota:job_data:" + job_id.bytes


def result_aad(occurrence_id: UUID) -> bytes:
    """Associated data of an occurrence's result."""
    return b"rota:result:" + occurrence_id.bytes


def failed_data_aad(failed_id: UUID) -> bytes:
    """Associated data of a failed occurrence's (dead letter's) copy of the job data."""
    return b"rota:failed_data:" + failed_id.bytes


def idempotency_aad(scope: str) -> bytes:
    """Associated data of a kept idempotent answer (its body holds the job's data)."""
    return b"rota:idempotency:" + scope.encode()


def is_envelope(value: object) -> bool:
    """Whether ``value`` is a sealed envelope (an object whose one key is ``$enc``, a text)."""
    return type(value) is dict and len(value) == 1 and isinstance(value.get(ENVELOPE_KEY), str)


def envelope_version(value: object) -> str | None:
    """The key version of an envelope; ``None`` for a value that is no envelope."""
    if not is_envelope(value):
        return None
    text: str = value[ENVELOPE_KEY]  # type: ignore[index]
    version, sep, _ = text.partition(":")
    return version if sep else None


def _pairs(text: str) -> list[tuple[object, object]]:
    """The (version, key) entries of the setting's text, in its order."""
    if text.startswith("{"):
        try:
            document = json.loads(text)
        except ValueError:
            raise KeySettingError(f"{KEYS_SETTING} is not valid JSON") from None
        if not isinstance(document, dict):
            raise KeySettingError(f"{KEYS_SETTING} must be a JSON object of version: key")
        return list(document.items())
    pairs: list[tuple[object, object]] = []
    for n, item in enumerate(text.split(","), 1):
        version, sep, key = item.strip().partition(":")
        if not sep:
            raise KeySettingError(f"{KEYS_SETTING}: entry {n} is not version:base64-key (no colon)")
        pairs.append((version.strip(), key.strip()))
    return pairs


def _key(version: str, key: object) -> bytes:
    if not isinstance(key, str):
        raise KeySettingError(f"{KEYS_SETTING}: the key of version {version} is no text")
    try:
        raw = base64.b64decode(key, validate=True)
    except (binascii.Error, ValueError):
        raise KeySettingError(
            f"{KEYS_SETTING}: the key of version {version} is not valid base64"
        ) from None
    if len(raw) != _KEY_BYTES:
        raise KeySettingError(
            f"{KEYS_SETTING}: the key of version {version} must be {_KEY_BYTES} bytes "
            f"(base64 of 32 random bytes: `openssl rand -base64 32`), not {len(raw)}"
        )
    return raw


def parse_keys(text: str) -> dict[str, bytes]:
    """The keys of the setting's text, in its order (the first is the newest):
    ``v2:<base64 of 32 bytes>,v1:<…>`` or a JSON object ``{"v2": "<base64>", …}``."""
    text = text.strip()
    if not text:
        raise KeySettingError(f"{KEYS_SETTING} is empty: unset it, or give version:key pairs")
    keys: dict[str, bytes] = {}
    for n, (version, key) in enumerate(_pairs(text), 1):
        if not isinstance(version, str) or not _VERSION.match(version):
            raise KeySettingError(
                f"{KEYS_SETTING}: entry {n}'s version must be 1-32 letters, digits, _ or -"
            )
        if version in keys:
            raise KeySettingError(f"{KEYS_SETTING}: version {version} is given twice")
        keys[version] = _key(version, key)
    return keys


def new_key() -> str:
    """A fresh key, base64 (what ``rota maintenance new-key`` prints)."""
    return base64.b64encode(os.urandom(_KEY_BYTES)).decode()


class DataSeal:
    """Seals and opens JSON values under versioned AES-256-GCM keys.

    ``keys``: version -> 32 bytes, newest first. ``current``: the version that seals (default
    the first); ``"none"``: decrypt-only (values are written plain, envelopes still open)."""

    __slots__ = ("_ciphers", "current")

    def __init__(self, keys: Mapping[str, bytes], current: str | None = None) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        if not keys:
            raise KeySettingError(f"{KEYS_SETTING} holds no key")
        self._ciphers: dict[str, AESGCM] = {v: AESGCM(k) for v, k in keys.items()}
        if current is None:
            current = next(iter(keys))
        elif current == "none":
            current = None
        elif current not in keys:
            raise KeySettingError(
                f"ROTA_ENCRYPTION__CURRENT names version {current}, which "
                f"{KEYS_SETTING} does not hold"
            )
        self.current: str | None = current
        """The version new values are sealed with; ``None``: decrypt-only."""

    @classmethod
    def from_setting(cls, text: str, current: str | None = None) -> DataSeal:
        return cls(parse_keys(text), current)

    @property
    def versions(self) -> tuple[str, ...]:
        return tuple(self._ciphers)

    def seal(self, value: JsonValue, aad: bytes) -> JsonValue:
        """``value`` sealed with the current key; ``None`` and an envelope as they are; the
        value itself when decrypt-only."""
        version = self.current
        if value is None or version is None or is_envelope(value):
            return value
        nonce = os.urandom(_NONCE)
        sealed = self._ciphers[version].encrypt(nonce, orjson.dumps(value), aad)
        return {ENVELOPE_KEY: f"{version}:{base64.b64encode(nonce + sealed).decode()}"}

    def open(self, value: JsonValue, aad: bytes) -> JsonValue:
        """The plain value of an envelope; any other value as it is. Raises
        :class:`SealError` when the envelope does not open."""
        if not is_envelope(value):
            return value
        text: str = value[ENVELOPE_KEY]
        version, sep, body = text.partition(":")
        cipher = self._ciphers.get(version)
        if not sep or cipher is None:
            raise SealError(f"sealed with an unknown key version {version!r}")
        try:
            raw = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            raise SealError("the sealed value is not valid base64") from None
        if len(raw) < _NONCE + 16:
            raise SealError("the sealed value is too short")
        from cryptography.exceptions import InvalidTag

        try:
            plain = cipher.decrypt(raw[:_NONCE], raw[_NONCE:], aad)
        except InvalidTag:
            raise SealError(
                f"the sealed value does not open with key {version}: altered, moved or "
                "sealed with another key of that version"
            ) from None
        result: Any = orjson.loads(plain)
        return result

    def seal_bytes(self, data: bytes, aad: bytes) -> bytes:
        """``data`` sealed as bytes (``$enc:<version>:`` + nonce + ciphertext); as it is
        when decrypt-only."""
        version = self.current
        if version is None:
            return data
        nonce = os.urandom(_NONCE)
        sealed = self._ciphers[version].encrypt(nonce, data, aad)
        return b"".join((_BYTES_MARK, version.encode(), b":", nonce, sealed))

    def open_bytes(self, data: bytes, aad: bytes) -> bytes:
        """The plain bytes of :meth:`seal_bytes`; other bytes as they are. Raises
        :class:`SealError` when they do not open."""
        if not data.startswith(_BYTES_MARK):
            return data
        version, sep, raw = data[len(_BYTES_MARK) :].partition(b":")
        cipher = self._ciphers.get(version.decode(errors="replace"))
        if not sep or cipher is None or len(raw) < _NONCE + 16:
            raise SealError(f"sealed with an unknown key version {version!r}")
        from cryptography.exceptions import InvalidTag

        try:
            return cipher.decrypt(raw[:_NONCE], raw[_NONCE:], aad)
        except InvalidTag:
            raise SealError(f"the sealed bytes do not open with key {version!r}") from None

    def stale(self, value: object) -> bool:
        """Whether ``value`` is not as the current key would store it: an envelope of an
        older version, plain data while a key seals, an envelope while decrypt-only."""
        if value is None:
            return False
        version = envelope_version(value)
        if version is None:
            return self.current is not None
        return version != self.current


def sealed_message(seal: DataSeal | None, message: JobMessage) -> JobMessage:
    """The job message with its job data sealed (what the dispatcher sends a worker when the
    deployment does not send plain data); as it is without a key that seals."""
    if seal is None or seal.current is None or message.job_data is None:
        return message
    return replace(message, job_data=seal.seal(message.job_data, job_data_aad(message.job_id)))


def opened_message(seal: DataSeal, message: JobMessage) -> JobMessage:
    """The job message with its job data opened (the worker, before anything reads it);
    raises :class:`SealError` when it does not open."""
    if not is_envelope(message.job_data):
        return message
    return replace(message, job_data=seal.open(message.job_data, job_data_aad(message.job_id)))


def sealed_status(seal: DataSeal | None, record: StatusRecord) -> StatusRecord:
    """A worker's status record with its result sealed (bound to the occurrence)."""
    if seal is None or seal.current is None or record.result is None:
        return record
    return replace(record, result=seal.seal(record.result, result_aad(record.occurrence_id)))
