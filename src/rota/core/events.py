"""Change events: what dashboards and API clients hear about over ``GET /api/v1/events``.

An event is a type (``occurrence.updated``, …) and a small JSON payload in camelCase. Events
are notifications, not the record: a client that needs the whole occurrence or job reads it
from the API. Services build them with the functions below and hand them to an
:class:`~rota.services.events.EventPublisher`; coordination carries them to every server.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final
from uuid import UUID

import orjson

from rota.core.errors import ValidationError
from rota.core.models import JsonValue, LogRecord, Occurrence, OccurrenceStatus, WorkerInfo
from rota.core.records import AppliedChange


class EventType(enum.StrEnum):
    OCCURRENCE_CREATED = "occurrence.created"
    OCCURRENCE_UPDATED = "occurrence.updated"
    OCCURRENCE_LOG = "occurrence.log"
    JOB_CREATED = "job.created"
    JOB_UPDATED = "job.updated"
    JOB_DELETED = "job.deleted"
    WORKER_CHANGED = "worker.changed"
    DISPATCHER_CHANGED = "dispatcher.changed"


class Event:
    """One change: its type and a JSON-ready payload (camelCase keys, ids as strings).

    The payload of the events every run makes (:func:`occurrence_created`,
    :func:`occurrence_updated`, :func:`occurrence_changed`) is rendered when it is first
    read, from the few values it is made of: an embedded server keeps its feed in memory, and
    what no client reads is never rendered. Such an event is one small object holding those
    values (a subclass's ``_render``), made in a fraction of a microsecond: a busy server
    makes two for every run."""

    __slots__ = ("_data", "type")

    def __init__(self, type: str, data: Mapping[str, JsonValue]) -> None:
        self.type = type
        self._data: Mapping[str, JsonValue] | None = data

    @classmethod
    def deferred(cls, type: str, render: Callable[[], Mapping[str, JsonValue]]) -> Event:
        """An event whose payload is ``render()``, rendered when first read."""
        return _Deferred(type, render)

    @property
    def data(self) -> Mapping[str, JsonValue]:
        data = self._data
        if data is None:
            data = self._data = self._render()
        return data

    def _render(self) -> Mapping[str, JsonValue]:
        """The payload of an event made without one (subclasses)."""
        raise NotImplementedError

    def packed(self) -> Any:
        """The payload as a feed carries it, for ``orjson`` to write: the run events' values
        in a list, as they are (ids, times and statuses written by ``orjson``, in C;
        :func:`unpacked` makes the event again), any other event's payload as it is."""
        return self.data

    @property
    def job_id(self) -> str | None:
        value = self.data.get("jobId")
        return value if isinstance(value, str) else None

    @property
    def occurrence_id(self) -> str | None:
        value = self.data.get("occurrenceId")
        return value if isinstance(value, str) else None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return self.type == other.type and self.data == other.data

    __hash__ = None  # type: ignore[assignment]  # (a payload is a dict)

    def __repr__(self) -> str:
        return f"Event(type={self.type!r}, data={self.data!r})"


class _Deferred(Event):
    __slots__ = ("_renderer",)

    def __init__(self, type: str, render: Callable[[], Mapping[str, JsonValue]]) -> None:
        self.type = type
        self._data = None
        self._renderer: Callable[[], Mapping[str, JsonValue]] | None = render

    def _render(self) -> Mapping[str, JsonValue]:
        render, self._renderer = self._renderer, None
        assert render is not None
        return render()


LOG_LINES_PER_EVENT: Final = 20
"""An ``occurrence.log`` event carries at most this many lines of a batch (the last ones)."""
LOG_MESSAGE_CHARS: Final = 500
"""Characters of a log message an event carries (the store has the whole line)."""

_EVENT_ID: Final = re.compile(r"^(\d{1,20})-(\d{1,20})-(\d{1,9})$")

_MAX_MS: Final = 2**48
"""Milliseconds of an event id stay below this (the year 10889), sequences below 2**63: what
a Redis stream id can hold."""
_MAX_SEQ: Final = 2**63

EventId = tuple[int, int, int]
"""``(milliseconds, sequence, index)``: the feed entry (a Redis stream id) and the event's
place in it; ids sort as these tuples do."""


def parse_event_id(value: str, field: str = "lastEventId") -> EventId:
    """An event id (``<ms>-<seq>-<n>``) as a sortable tuple; ``ValidationError`` naming
    ``field`` if it is not one."""
    match = _EVENT_ID.match(value.strip())
    parsed = None if match is None else (int(match[1]), int(match[2]), int(match[3]))
    if parsed is None or parsed[0] >= _MAX_MS or parsed[1] >= _MAX_SEQ:
        raise ValidationError(
            "an event id looks like 1700000000000-0-0 (milliseconds-sequence-index)",
            field=field,
        )
    return parsed


def format_event_id(event_id: EventId) -> str:
    return "-".join(map(str, event_id))


_STATUS_NAMES: Final = {s: s.name.title().replace("_", "") for s in OccurrenceStatus}
_CREATED: Final = EventType.OCCURRENCE_CREATED.value
_UPDATED: Final = EventType.OCCURRENCE_UPDATED.value
_LOG: Final = EventType.OCCURRENCE_LOG.value


def status_name(status: OccurrenceStatus) -> str:
    """``TIMED_OUT`` -> ``TimedOut``: the API's name of a status."""
    return _STATUS_NAMES[status]


_CREATED_FIELDS: Final = (
    "occurrenceId",
    "jobId",
    "jobType",
    "workerId",
    "status",
    "attempt",
    "scheduledFor",
    "skipReason",
)
"""The packed ``occurrence.created``'s values, in order (``statusName`` follows from
``status``)."""
_UPDATED_FIELDS: Final = (
    "occurrenceId",
    "jobId",
    "jobType",
    "workerId",
    "instanceId",
    "fromStatus",
    "status",
    "attempt",
)
"""The packed ``occurrence.updated``'s values, in order."""
_PACKED_FIELDS: Final = {_CREATED: _CREATED_FIELDS, _UPDATED: _UPDATED_FIELDS}


def _expand(fields: Sequence[str], values: Sequence[JsonValue]) -> dict[str, JsonValue]:
    """A run event's payload from its packed values."""
    data = dict(zip(fields, values, strict=True))
    status = data["status"]
    data["statusName"] = (
        _STATUS_NAMES[OccurrenceStatus(status)] if isinstance(status, int) else None
    )
    return data


def _uuid_text(value: object) -> str:
    """What ``orjson`` does not write itself: a UUID of another class (asyncpg's)."""
    if isinstance(value, UUID):
        return str(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


def pack_events(events: Sequence[Event]) -> bytes:
    """Events as a feed carries them: a JSON array of ``[type, payload]`` pairs, each payload
    :meth:`Event.packed` (:func:`unpacked` reads one back)."""
    return orjson.dumps([[e.type, e.packed()] for e in events], default=_uuid_text)


def unpacked(type: str, payload: JsonValue) -> Event:
    """An event as a feed carried it (:meth:`Event.packed`); ``ValueError`` or ``TypeError``
    for a payload that is not one."""
    fields = _PACKED_FIELDS.get(type)
    if fields is not None and isinstance(payload, list):
        return Event(type, _expand(fields, payload))
    if not isinstance(payload, dict):
        raise TypeError(f"an event payload is an object, not {payload!r:.40}")
    return Event(type, payload)


class _Packed(Event):
    """A run event rendered from its packed values (:meth:`packed`, of a subclass): the
    payload a reader of the feed gets."""

    __slots__ = ()

    def _render(self) -> Mapping[str, JsonValue]:
        packed = orjson.dumps(self.packed(), default=_uuid_text)
        return _expand(_PACKED_FIELDS[self.type], orjson.loads(packed))


class _Values(_Packed):
    """A run event made of its packed values, in :data:`_PACKED_FIELDS`' order."""

    __slots__ = ("_values",)

    def __init__(self, type: str, values: tuple[Any, ...]) -> None:
        self.type = type
        self._data = None
        self._values = values

    def packed(self) -> list[Any]:
        return list(self._values)


def occurrence_created(occurrence: Occurrence) -> Event:
    # The values, not the occurrence: its job data stays out of the feed.
    o = occurrence
    values = (
        o.id,
        o.job_id,
        o.job_type,
        o.worker_id,
        o.status,
        o.attempt,
        o.scheduled_for,
        o.skip_reason,
    )
    return _Values(_CREATED, values)


class _Applied(_Packed):
    """``occurrence.updated`` of a change the store applied: it holds the change."""

    __slots__ = ("_change",)

    def __init__(self, change: AppliedChange) -> None:
        self.type = _UPDATED
        self._data = None
        self._change = change

    def packed(self) -> list[Any]:
        c = self._change
        return [
            c.occurrence_id,
            c.job_id,
            c.job_type,
            c.worker_id,
            c.instance_id,
            c.from_status,
            c.to_status,
            c.attempt,
        ]


def occurrence_updated(
    *,
    occurrence_id: UUID,
    job_id: UUID,
    job_type: str,
    worker_id: str | None,
    instance_id: str | None,
    from_status: OccurrenceStatus | None,
    status: OccurrenceStatus,
    attempt: int,
) -> Event:
    return _Values(
        _UPDATED,
        (occurrence_id, job_id, job_type, worker_id, instance_id, from_status, status, attempt),
    )


def occurrence_changed(change: AppliedChange) -> Event:
    """``occurrence.updated`` for a change the store applied."""
    return _Applied(change)


def occurrence_logs(records: Sequence[LogRecord]) -> list[Event]:
    """One compact ``occurrence.log`` event per occurrence of a batch of log lines: how many
    lines arrived, the last :data:`LOG_LINES_PER_EVENT` of them (messages cut to
    :data:`LOG_MESSAGE_CHARS`), and the last line's ``level`` and ``message`` at the top."""
    by_occurrence: dict[UUID, list[LogRecord]] = {}
    for record in records:
        lines = by_occurrence.get(record.occurrence_id)
        if lines is None:
            by_occurrence[record.occurrence_id] = [record]
        else:
            lines.append(record)
    events = []
    cut = LOG_MESSAGE_CHARS
    for occurrence_id, lines in by_occurrence.items():
        shown = [
            {
                "timestamp": line.timestamp.isoformat(),
                "level": line.level,
                "message": line.message[:cut],
            }
            for line in lines[-LOG_LINES_PER_EVENT:]
        ]
        last = shown[-1]
        events.append(
            Event(
                _LOG,
                {
                    "occurrenceId": str(occurrence_id),
                    "level": last["level"],
                    "message": last["message"],
                    "count": len(lines),
                    "lines": shown,
                },
            )
        )
    return events


def job_changed(kind: EventType, job_ids: Iterable[UUID], **extra: JsonValue) -> list[Event]:
    """``job.created`` / ``job.updated`` / ``job.deleted`` events, one per job."""
    if not extra:  # (a bulk create's thousands of events: no merge per event)
        return [Event(kind, {"jobId": str(job_id)}) for job_id in job_ids]
    return [Event(kind, {"jobId": str(job_id), **extra}) for job_id in job_ids]


def worker_changed(change: str, info: WorkerInfo) -> Event:
    """A worker instance appeared (``joined``), left (``left``) or changed its declaration or
    capacity (``changed``)."""
    return Event(
        EventType.WORKER_CHANGED,
        {
            "change": change,
            "workerId": info.worker_id,
            "instanceId": info.instance_id,
            "concurrency": info.concurrency,
            "currentLoad": info.current_load,
            "jobTypes": sorted(info.job_types),
        },
    )
