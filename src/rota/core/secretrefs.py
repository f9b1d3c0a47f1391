"""Secret references in job data: ``{"$secret": "BILLING_TOKEN"}`` stands for a secret that
only the worker knows, resolved there just before the handler runs (:mod:`rota.worker.secrets`
reads the values). The rules here are pure: what a reference is, where references are in a
value, the value with each reference replaced, and a text or JSON value with known secret
values masked (what a worker reports must never carry a resolved secret).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from rota.core.errors import ValidationError

__all__ = [
    "MIN_MASKED_LENGTH",
    "SECRET_KEY",
    "Masker",
    "MissingSecretError",
    "placeholders",
    "reference_name",
    "references",
    "resolve",
    "secret",
]

SECRET_KEY: Final = "$secret"
"""The one key of a reference object."""

NAME: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
"""A secret's name: letters, digits, ``_``, ``.`` and ``-`` (not first), 128 at most; no
``/``, so a name never leaves the secrets directory."""

MIN_MASKED_LENGTH: Final = 4
"""Shorter secret values are not masked in what a worker reports (they would mask ordinary
text): keep secrets long."""


def secret(name: str) -> dict[str, str]:
    """The reference to the worker's secret ``name``, to put in job data:
    ``{"$secret": name}``."""
    if not NAME.fullmatch(name):
        raise ValueError(f"invalid secret name {name[:40]!r}: letters, digits, _ . - (128 max)")
    return {SECRET_KEY: name}


def reference_name(value: object) -> str | None:
    """The name ``value`` refers to when it is a reference (an object whose only key is
    ``$secret``), else ``None``. The name is not checked (see :func:`references`)."""
    if isinstance(value, dict) and len(value) == 1 and SECRET_KEY in value:
        name = value[SECRET_KEY]
        return name if isinstance(name, str) else ""
    return None


def _walk(value: Any, path: list[str | int]) -> Iterator[tuple[list[str | int], str]]:
    name = reference_name(value)
    if name is not None:
        yield path, name
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, [*path, key])
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, [*path, index])


def _field(base: str, path: list[str | int]) -> str:
    out = base
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def references(data: Any, field: str = "jobData") -> list[tuple[str, str]]:
    """Each reference in ``data`` as (its field, ``jobData.headers.Authorization``; its
    name). Raises :class:`ValidationError` naming the field of a reference whose name is not
    a valid secret name."""
    found: list[tuple[str, str]] = []
    for path, name in _walk(data, []):
        where = _field(field, path)
        if not NAME.fullmatch(name):
            raise ValidationError(
                f"{where}: a secret reference needs a name of letters, digits, _ . - "
                '(128 at most), e.g. {"$secret": "BILLING_TOKEN"}',
                field=where,
            )
        found.append((where, name))
    return found


class MissingSecretError(Exception):
    """A reference to a secret the worker does not have."""

    def __init__(self, name: str, field: str) -> None:
        super().__init__(
            f"secret reference {name!r} at {field} cannot be resolved: this worker has no "
            f"such secret (set the environment variable ROTA_SECRET_{name} or a file {name} "
            "in its secrets directory)"
        )
        self.name = name
        self.field = field


def resolve(data: Any, lookup: Callable[[str], str | None], field: str = "jobData") -> Any:
    """``data`` with each reference replaced by its secret's value (a string) from
    ``lookup`` (``None``: not there, :class:`MissingSecretError`). ``data`` itself is not
    changed; without references it is returned as it is."""
    found = references(data, field)
    if not found:
        return data
    values: dict[str, str] = {}
    for where, name in found:
        if name not in values:
            value = lookup(name)
            if value is None:
                raise MissingSecretError(name, where)
            values[name] = value
    return _replace(data, values.__getitem__)


def placeholders(data: Any) -> Any:
    """``data`` with each reference replaced by a string (what it resolves to), for checks
    of its shape made before it is resolved (a job type's data schema)."""
    if not any(True for _ in _walk(data, [])):
        return data
    return _replace(data, lambda name: f"secret:{name}")


def _replace(value: Any, of: Callable[[str], str]) -> Any:
    name = reference_name(value)
    if name is not None:
        return of(name)
    if isinstance(value, dict):
        return {key: _replace(item, of) for key, item in value.items()}
    if isinstance(value, list):
        return [_replace(item, of) for item in value]
    return value


class Masker:
    """Masks known secret values in text and JSON: each value (of at least
    :data:`MIN_MASKED_LENGTH` characters) becomes ``[secret NAME]``."""

    __slots__ = ("_pattern", "_values")

    def __init__(self) -> None:
        self._values: dict[str, str] = {}
        self._pattern: re.Pattern[str] | None = None

    def add(self, values: Mapping[str, str]) -> None:
        """Remember these values (name -> value) to mask from now on."""
        changed = False
        for name, value in values.items():
            if len(value) >= MIN_MASKED_LENGTH and self._values.get(value) != name:
                self._values[value] = name
                changed = True
        if changed:  # longest first: a value that holds another is masked whole
            ordered = sorted(self._values, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(v) for v in ordered))

    @property
    def active(self) -> bool:
        return self._pattern is not None

    def text(self, text: str) -> str:
        pattern = self._pattern
        if pattern is None or not text:
            return text
        return pattern.sub(lambda m: f"[secret {self._values[m.group(0)]}]", text)

    def json(self, value: Any) -> Any:
        """A JSON value with the secrets masked in every string (keys too)."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(str(k)): self.json(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.json(v) for v in value]
        return value
