"""Cluster-wide limits on job types (docs/concepts.md, "Limits").

A :class:`JobLimit` caps, for one job type and across every worker instance of the cluster:

* ``max_concurrent``: how many of its occurrences run at once, either for the whole type or,
  with ``key``, for each distinct value of that top-level field of the job data (at most 2
  ``sync`` runs per ``customerId``);
* ``rate``: how many of its occurrences start per second (the whole type).

The worker takes a slot (and a start of the rate) from the coordination before it starts an
occurrence of a limited type (:mod:`rota.worker.gate`); an occurrence that gets none waits,
unstarted and unacknowledged, without holding a worker slot.

The records here cross the :class:`~rota.core.ports.limits.LimitMemory` port.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from rota.core.errors import ValidationError

__all__ = [
    "MAX_CONCURRENT",
    "MAX_LIMITS",
    "MAX_RATE",
    "JobLimit",
    "LimitGrant",
    "LimitHold",
    "LimitRequest",
    "LimitUsage",
    "LimitWaiter",
    "limits_from_json",
    "limits_to_json",
    "rate_window",
    "validate_limits",
]

MAX_CONCURRENT = 100_000
MAX_RATE = 100_000.0
MAX_LIMITS = 1_000
"""The most job types that can be limited."""
MAX_NAME = 200
MAX_KEY_VALUE = 100
"""Key values longer than this (as JSON) are hashed into the slot's name."""


@dataclass(frozen=True, slots=True)
class JobLimit:
    """The limits of one job type (at least one of ``max_concurrent`` and ``rate``)."""

    job_type: str
    max_concurrent: int | None = None
    """At most this many of its occurrences run at once (per ``key`` value, with a key)."""
    key: str | None = None
    """A top-level field of the job data: ``max_concurrent`` applies per distinct value."""
    rate: float | None = None
    """At most this many of its occurrences start per second (the whole type)."""

    def slot_key(self, job_data: Any) -> str | None:
        """The name of the semaphore an occurrence with ``job_data`` takes a slot of (``None``:
        no concurrency limit). The type's name, with a key ``type|field=<value as JSON>``; a
        missing field (or data that is not an object) counts as ``null``."""
        if self.max_concurrent is None:
            return None
        if self.key is None:
            return self.job_type
        value = job_data.get(self.key) if isinstance(job_data, Mapping) else None
        text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
        if len(text) > MAX_KEY_VALUE:
            text = "#" + hashlib.sha256(text.encode()).hexdigest()[:32]
        return f"{self.job_type}|{self.key}={text}"

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.job_type,
            "max": self.max_concurrent,
            "key": self.key,
            "ratePerSecond": self.rate,
        }


def rate_window(rate: float) -> tuple[int, float]:
    """The sliding window that enforces ``rate`` starts per second: at most ``count`` starts in
    any ``seconds`` (``count`` = ⌊rate⌋, at least 1; ``seconds`` = count / rate): 5/s is 5 in
    any second, 0.5/s one in any 2 s, 2.5/s 2 in any 0.8 s."""
    count = max(1, math.floor(rate))
    return count, count / rate


@dataclass(frozen=True, slots=True)
class LimitRequest:
    """One occurrence asking to start: a slot of ``slot_key`` (of ``max_concurrent``) and one
    start of ``rate_key``'s window, both or neither."""

    token: str
    """The holder's token: the occurrence id."""
    slot_key: str | None = None
    max_concurrent: int = 0
    rate_key: str | None = None
    rate: float = 0.0
    label: str = ""
    """What it waits for, as shown while it waits (the limit's slot or type)."""


@dataclass(frozen=True, slots=True)
class LimitGrant:
    granted: bool
    wait: float = 0.0
    """When refused by the rate: seconds until a start frees up (0: unknown, or a slot)."""
    holding: int = 0
    """When refused by the slots: how many hold a slot of it."""


@dataclass(frozen=True, slots=True)
class LimitHold:
    """A slot held: ``token`` in ``slot_key``'s semaphore."""

    slot_key: str
    token: str


@dataclass(frozen=True, slots=True)
class LimitWaiter:
    token: str
    label: str
    since: datetime


@dataclass(frozen=True, slots=True)
class LimitUsage:
    """What the coordination knows now: slots held per semaphore, and who waits."""

    running: Mapping[str, int]
    """Slot key -> live holders (only keys with holders)."""
    waiting: Sequence[LimitWaiter]
    """Occurrences waiting for a limit, oldest first."""


def _field(index: int, name: str) -> str:
    return f"limits[{index}].{name}"


def validate_limits(limits: Iterable[JobLimit]) -> list[JobLimit]:
    """The limits, checked (``ValidationError`` naming the field), one per job type, sorted."""
    out: dict[str, JobLimit] = {}
    errors: list[ValidationError] = []
    for i, limit in enumerate(limits):
        if not 0 < len(limit.job_type) <= MAX_NAME:
            errors.append(ValidationError("1 to 200 characters", field=_field(i, "type")))
        elif limit.job_type in out:
            errors.append(
                ValidationError(f"{limit.job_type!r} limited twice", field=_field(i, "type"))
            )
        m, rate, key = limit.max_concurrent, limit.rate, limit.key
        if m is None and rate is None:
            errors.append(
                ValidationError("give max, ratePerSecond or both", field=_field(i, "max"))
            )
        if m is not None and not 1 <= m <= MAX_CONCURRENT:
            errors.append(ValidationError("between 1 and 100000", field=_field(i, "max")))
        if rate is not None and not (math.isfinite(rate) and 0 < rate <= MAX_RATE):
            errors.append(
                ValidationError("above 0, at most 100000", field=_field(i, "ratePerSecond"))
            )
        if key is not None and not 0 < len(key) <= MAX_NAME:
            errors.append(ValidationError("1 to 200 characters", field=_field(i, "key")))
        elif key is not None and m is None:
            errors.append(ValidationError("a key needs max", field=_field(i, "key")))
        out.setdefault(limit.job_type, limit)
    if len(out) > MAX_LIMITS:
        errors.append(ValidationError("at most 1000 limits", field="limits"))
    if errors:
        raise ValidationError(errors[0].message, field=errors[0].field, errors=errors)
    return [out[name] for name in sorted(out)]


def limits_to_json(limits: Sequence[JobLimit]) -> bytes:
    return orjson.dumps([limit.to_json() for limit in limits])


def limits_from_json(raw: bytes | str | list[Any]) -> list[JobLimit]:
    """The limits kept as :func:`limits_to_json` wrote them."""
    items = orjson.loads(raw) if isinstance(raw, bytes | str) else raw
    return [
        JobLimit(
            job_type=str(item["type"]),
            max_concurrent=None if item.get("max") is None else int(item["max"]),
            key=item.get("key"),
            rate=None if item.get("ratePerSecond") is None else float(item["ratePerSecond"]),
        )
        for item in items
    ]
