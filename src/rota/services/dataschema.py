"""Job data checked against the JSON Schema its job type's workers publish.

A worker registers each job type with the JSON Schema of its data (``WorkerInfo.job_types``,
``schema``; made from the handler's pydantic model by the SDK). The dashboard's form checks
job data against it in the browser; :class:`DataSchemas` makes the server check the same, so
a create, an update or a bulk create whose data does not fit is refused with the field named
(``jobData.kind``), not found out by the worker at run time.

The schemas come from workers, so their cost is bounded: a schema larger than
``max_schema_bytes`` (as JSON) is not used, references are resolved only inside the schema
(no retrieval over the network), patterns use a linear-time regex engine, and compiled
validators are cached by the schema's hash (at most ``cache_size``). A schema that cannot be
compiled (an unknown draft keyword, a lookaround pattern) is logged once and not used: the
data is then accepted unchecked, as when no worker published a schema.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Final

import jsonschema_rs
import orjson

from rota.core.errors import ValidationError
from rota.core.models import JsonValue

log = logging.getLogger(__name__)

MAX_SCHEMA_BYTES: Final = 64 * 1024
"""The largest data schema (as compact JSON) the server checks job data against."""
CACHE_SIZE: Final = 256
"""Compiled validators kept (by schema hash), least recently used dropped first."""
MAX_REPORTED: Final = 20
"""At most this many misfits of one job's data are reported."""
MAX_PATTERN_BYTES: Final = 1 << 20
"""The largest compiled regular expression of a schema's ``pattern``."""
_UNUSABLE: Final = (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError)
"""What compiling (or, for a reference, using) a schema that cannot be used raises."""


def field_of(base: str, path: Any) -> str:
    """``jobData`` and an instance path (``["items", 1, "name"]``) -> ``jobData.items[1].name``."""
    text = base
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


DataCheck = Callable[[Any], "tuple[str, str] | None"]
"""A server-side check of a job type's data, for what a JSON Schema cannot say (the URL rules
of ``http.request``): ``(path, why)`` of the first misfit, the path under the job data
(``"url"``), or ``None``. Pure and quick: no look-up, no I/O."""


class DataSchemas:
    """Compiles data schemas (cached by hash) and checks job data against them, and against
    the server's own checks of some job types (``checks``: job type -> :data:`DataCheck`;
    the composition root gives the built-in types')."""

    def __init__(
        self,
        *,
        max_schema_bytes: int = MAX_SCHEMA_BYTES,
        cache_size: int = CACHE_SIZE,
        checks: Mapping[str, DataCheck] | None = None,
    ) -> None:
        self.checks: Mapping[str, DataCheck] = dict(checks or {})
        self.max_schema_bytes = max_schema_bytes
        self._cache_size = cache_size
        self._by_hash: OrderedDict[bytes, jsonschema_rs.Validator | None] = OrderedDict()
        # The schema objects seen last (a refresh of the worker registry makes new ones):
        # their validator without serializing and hashing them again for every job of a bulk.
        self._by_identity: dict[int, tuple[object, jsonschema_rs.Validator | None]] = {}
        self.compiled = 0
        """Schemas compiled since start (a cache miss each)."""

    def validator(self, schema: object) -> jsonschema_rs.Validator | None:
        """The compiled validator of ``schema``, or ``None`` if it is not to be used (not a
        schema object, too large, or not compilable)."""
        seen = self._by_identity.get(id(schema))
        if seen is not None and seen[0] is schema:
            return seen[1]
        validator = self._compiled(schema)
        if len(self._by_identity) >= self._cache_size:
            self._by_identity.clear()
        self._by_identity[id(schema)] = (schema, validator)
        return validator

    def _compiled(self, schema: object) -> jsonschema_rs.Validator | None:
        if not isinstance(schema, dict | bool):
            return None
        try:
            raw = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
        except TypeError:
            return None
        key = hashlib.sha256(raw).digest()
        if key in self._by_hash:
            self._by_hash.move_to_end(key)
            return self._by_hash[key]
        validator: jsonschema_rs.Validator | None = None
        if len(raw) > self.max_schema_bytes:
            log.warning(
                "a data schema of %d bytes is over the limit of %d: job data of its type "
                "is not checked",
                len(raw),
                self.max_schema_bytes,
            )
        else:
            try:
                validator = jsonschema_rs.validator_for(
                    schema,
                    offline=True,
                    pattern_options=jsonschema_rs.RegexOptions(size_limit=MAX_PATTERN_BYTES),
                )
                self.compiled += 1
            except _UNUSABLE as exc:
                log.warning(
                    "a data schema cannot be used, job data of its type is not checked: %s",
                    _first_line(exc),
                )
        self._by_hash[key] = validator
        if len(self._by_hash) > self._cache_size:
            self._by_hash.popitem(last=False)
        return validator

    def check_rules(self, job_type: str, data: JsonValue, field: str = "jobData") -> None:
        """Raise :class:`ValidationError` (field ``jobData.<path>``) when the server's own
        check of ``job_type`` (if it has one) refuses ``data``; whether or not a worker of it
        is live."""
        rule = self.checks.get(job_type.strip())
        misfit = None if rule is None else rule(data)
        if misfit is not None:
            path, why = misfit
            name = field_of(field, path.split("."))
            raise ValidationError(f"{name}: {why}", field=name)

    def check(
        self,
        job_type: str,
        description: Mapping[str, Any] | None,
        data: JsonValue,
        field: str = "jobData",
    ) -> None:
        """Raise :class:`ValidationError` (its field ``jobData.<path>``, every misfit up to
        :data:`MAX_REPORTED` in ``errors``) when ``data`` does not fit the ``schema`` of the
        job type's ``description``. No description, no schema, or a schema not to be used:
        no check. No data (``null``) means the handler's default, as the SDK reads it: it
        fits a schema that takes ``null`` (``dict | None``), else it is checked as ``{}``
        (an empty ``dict``, a model's defaults; a model with required fields is refused)."""
        if description is None:
            return
        schema = description.get("schema")
        validator = self.validator(schema)
        if validator is None:
            return
        if data is None:  # the handler's default: None if its type takes it, else {}
            if validator.is_valid(None):
                return
            data = {}
        misfits: list[ValidationError] = []
        try:
            for error in validator.iter_errors(data):
                misfits.append(_misfit(job_type, error, field))
                if len(misfits) >= MAX_REPORTED:
                    break
        except _UNUSABLE as exc:
            log.warning("job data of %s could not be checked: %s", job_type, _first_line(exc))
            return
        if not misfits:
            return
        first = misfits[0]
        more = len(misfits) - 1
        message = first.message if not more else f"{first.message} (and {more} more)"
        raise ValidationError(message, field=first.field, errors=misfits)


_UNEXPECTED: Final = (
    jsonschema_rs.ValidationErrorKind.AdditionalProperties,
    jsonschema_rs.ValidationErrorKind.UnevaluatedProperties,
)


def _misfit(job_type: str, error: jsonschema_rs.ValidationError, base: str) -> ValidationError:
    """One misfit, named where the data should change: a missing property by its own name
    (``jobData.kind``), a property not allowed by its name too (the first one)."""
    path = list(error.instance_path)
    kind = error.kind
    if isinstance(kind, jsonschema_rs.ValidationErrorKind.Required):
        field = field_of(base, [*path, kind.property])
        return ValidationError(f"{field} is required by the data schema of {job_type}", field=field)
    if isinstance(kind, _UNEXPECTED) and kind.unexpected:
        field = field_of(base, [*path, kind.unexpected[0]])
        return ValidationError(
            f"{field} is not allowed by the data schema of {job_type}: {error.message}",
            field=field,
        )
    field = field_of(base, path)
    return ValidationError(
        f"{field} does not fit the data schema of {job_type}: {error.message}", field=field
    )


def _first_line(exc: Exception) -> str:
    return str(exc).strip().split("\n", 1)[0]
