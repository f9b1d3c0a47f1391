"""``GET /events``: change events as server-sent events (``text/event-stream``).

Each event is ``id: <event id>``, ``event: <type>``, ``data: <JSON, camelCase>``. A client that
reconnects with ``Last-Event-ID`` (browsers do it by themselves) or ``?lastEventId=`` first gets
the kept events it missed, then the live ones. A comment line is sent every 15 s while nothing
happens, so proxies keep the connection open.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated
from uuid import UUID

import orjson
from fastapi import APIRouter, Depends, Header, Query
from fastapi.sse import EventSourceResponse, ServerSentEvent

from rota.api.deps import Runtime
from rota.api.problems import problem_responses
from rota.api.schemas.common import NO_NUL
from rota.api.security import requires
from rota.core.errors import ValidationError
from rota.core.events import Event, EventType, parse_event_id
from rota.core.security import Role

router = APIRouter(prefix="/events", tags=["events"], dependencies=[requires(Role.VIEWER)])

RETRY_MS = 3000
"""How long a browser waits before it reconnects (sent once, first)."""

_TYPES = frozenset(t.value for t in EventType)


@dataclass(frozen=True, slots=True)
class EventFilter:
    after: str | None
    types: frozenset[str] | None
    job_id: str | None
    occurrence_id: str | None
    ready: bool = False

    def matches(self, event: Event) -> bool:
        if self.types is not None and event.type not in self.types:
            return False
        if self.job_id is not None and event.job_id != self.job_id:
            return False
        return self.occurrence_id is None or event.occurrence_id == self.occurrence_id


def event_filter(
    last_event_id_header: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            max_length=100,
            description="Resume after this event id (sent by browsers when they reconnect).",
        ),
    ] = None,
    last_event_id: Annotated[
        str | None,
        Query(
            alias="lastEventId",
            max_length=100,
            pattern=NO_NUL,
            description="Resume after this event id; the Last-Event-ID header wins.",
        ),
    ] = None,
    types: Annotated[
        str | None,
        Query(
            max_length=500,
            pattern=NO_NUL,
            description="Only these event types, comma-separated (e.g. "
            "occurrence.updated,job.created).",
        ),
    ] = None,
    job_id: Annotated[UUID | None, Query(alias="jobId", description="Only this job's.")] = None,
    occurrence_id: Annotated[
        UUID | None, Query(alias="occurrenceId", description="Only this occurrence's.")
    ] = None,
    ready: Annotated[
        bool,
        Query(
            description="Also send a `ready` event once the subscription is in place (a "
            "browser's EventSource does not see the `connected` comment): a page refreshes "
            "what it shows then, catching what changed before it subscribed."
        ),
    ] = False,
) -> EventFilter:
    """The checked query: a malformed id or an unknown type is a 422 before the stream
    starts."""
    after = last_event_id_header or last_event_id or None
    if after is not None:
        field = "Last-Event-ID" if last_event_id_header else "lastEventId"
        parse_event_id(after, field=field)
    wanted = None
    if types is not None:
        wanted = frozenset(t.strip() for t in types.split(",") if t.strip())
        unknown = sorted(wanted - _TYPES)
        if unknown:
            raise ValidationError(
                f"unknown event type {unknown[0]!r}; known: {', '.join(sorted(_TYPES))}",
                field="types",
            )
    return EventFilter(
        after=after,
        types=wanted or None,
        job_id=None if job_id is None else str(job_id),
        occurrence_id=None if occurrence_id is None else str(occurrence_id),
        ready=ready,
    )


async def _gap(runtime: Runtime, after: str | None) -> ServerSentEvent | None:
    """A ``gap`` message when the client resumes after an event older than every event the
    feed still keeps, once it has dropped some: what came between may be lost, so it should
    reload what it shows."""
    if after is None:
        return None
    oldest = await runtime.coordination.feed_horizon()
    if oldest is None or parse_event_id(oldest) <= parse_event_id(after):
        return None
    data = {"after": after, "oldest": oldest}
    return ServerSentEvent(event="gap", raw_data=orjson.dumps(data).decode())


@router.get(
    "",
    response_class=EventSourceResponse,
    responses=problem_responses(422, 503),
    summary="Live change events (server-sent events), with replay from Last-Event-ID",
)
async def stream_events(
    runtime: Runtime, selected: Annotated[EventFilter, Depends(event_filter)]
) -> AsyncIterator[ServerSentEvent]:
    """Event types: ``occurrence.created``, ``occurrence.updated``, ``occurrence.log``,
    ``job.created``, ``job.updated``, ``job.deleted``, ``worker.changed``,
    ``dispatcher.changed`` (payloads in docs/api.md). The first message is a ``connected``
    comment with the reconnect delay: the subscription is in place once it arrives. A client
    resuming after an event the feed no longer keeps gets a ``gap`` message first (reload)."""
    stream = runtime.coordination.events(selected.after)
    try:
        ready = getattr(stream, "ready", None)
        if ready is not None:  # a reader that finds its start in the background: wait for it
            await ready()
        yield ServerSentEvent(comment="connected", retry=RETRY_MS)
        gap = await _gap(runtime, selected.after)
        if gap is not None:
            yield gap
        if selected.ready:
            yield ServerSentEvent(event="ready", raw_data="{}")
        async for event_id, event in stream:
            if selected.matches(event):
                yield ServerSentEvent(
                    id=event_id,
                    event=event.type,
                    raw_data=orjson.dumps(event.data).decode(),
                )
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()
