"""Server-sent change events: :class:`StreamEvent` and the parser of the stream."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One server-sent change event (see docs/api.md for the types and payloads), or a
    ``gap`` message (``id`` empty): events between the last one seen and the oldest the
    server keeps may be lost, reload what you show."""

    id: str
    type: str
    data: dict[str, Any] = field(default_factory=dict)


class SseParser:
    def __init__(self) -> None:
        self._id: str | None = None
        self._type: str | None = None
        self._data: list[str] = []

    def feed(self, line: str) -> StreamEvent | None:
        if line == "":
            event = None
            if self._type is not None:
                raw = "\n".join(self._data)
                data = orjson.loads(raw) if raw else {}
                event = StreamEvent(self._id or "", self._type, data)
            self._id, self._type, self._data = None, None, []
            return event
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "id":
            self._id = value
        elif name == "event":
            self._type = value
        elif name == "data":
            self._data.append(value)
        return None
