"""Which worker groups serve which job types, read from the coordination registry and cached
briefly so the dispatcher does not ask for every batch; which job types any worker has
ever declared (kept in the store), so that a fire of a type whose workers are merely down is
not taken for one of a type nothing runs; and the data schema each group last published for
each type (kept in the store too), which job data is checked against while none is live."""

from __future__ import annotations

import asyncio
import bisect
import itertools
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

from rota.core.errors import BackendUnavailableError
from rota.core.events import Event, worker_changed
from rota.core.models import JobMessage, WorkerInfo, utcnow
from rota.core.ports import JobTypeHistory, JobTypeSchemas, WorkerRegistry
from rota.core.records import PublishedSchema
from rota.services._loop import run_periodically
from rota.services.events import EventPublisher

log = logging.getLogger(__name__)

ROSTER_INTERVAL = 2.0
"""Seconds between two readings of the registry by the roster watcher."""


class WorkerDirectory:
    """A short-lived cache of the live workers' declared job types, and the job types ever
    declared.

    ``history``: where the ``(job type, worker group)`` pairs ever declared are kept. The
    first refresh reads them (once, retried on the next refresh if the store does not
    answer); a pair first seen live is added to it (one insert, only for new pairs). Without
    a history, "ever declared" is what this directory has seen since it was made.

    A history that is also :class:`~rota.core.ports.JobTypeSchemas` keeps the data schema
    each group's newest instance publishes for each type: read once with the history, and
    written when a group publishes one that differs from what is kept (a deploy)."""

    def __init__(
        self,
        coordination: WorkerRegistry,
        *,
        max_age: float = 1.0,
        history: JobTypeHistory | None = None,
    ) -> None:
        self._coordination = coordination
        self._max_age = max_age
        self._history = history
        self._history_read = history is None
        self._schema_store = history if isinstance(history, JobTypeSchemas) else None
        self._published: dict[tuple[str, str], PublishedSchema] = {}
        self._unpublished: dict[tuple[str, str], PublishedSchema] = {}
        self._declared: dict[str, set[str]] = {}
        self._unrecorded: set[tuple[str, str]] = set()
        self._read_at = 0.0
        self._by_type: dict[str, set[str]] = {}
        self._workers: list[WorkerInfo] = []
        self._defaults: dict[str, Mapping[str, Any]] = {}
        self._roster: tuple[tuple[str, datetime], ...] = ()
        self._generation = 0
        self._capacity: dict[str, int] = {}
        self._envelopes: dict[str, int] = {}
        """The live groups whose every instance reads envelopes: the most jobs each takes in
        one (the smallest its instances announced)."""
        self._instances: dict[str, int] = {}
        self._routes: dict[tuple[str, str | None], _Route | None] = {}

    def envelopes(self, messages: Iterable[JobMessage]) -> dict[str, int]:
        """For a batch of job messages, the groups that get envelopes and the most jobs in
        one: what their instances announced, and no more than shares the group's jobs of the
        batch among its live instances (RabbitMQ gives messages out in turn, so every instance
        gets a part of a burst)."""
        counts = Counter(message.worker_id for message in messages)
        sizes: dict[str, int] = {}
        for group, size in self._envelopes.items():
            share = -(-counts.get(group, 0) // self._instances.get(group, 1))
            if min(size, share) > 1:
                sizes[group] = min(size, share)
        return sizes

    async def refresh(self, *, force: bool = False) -> None:
        if not force and time.monotonic() - self._read_at < self._max_age:
            return
        workers = await self._coordination.workers()
        by_type: dict[str, set[str]] = {}
        defaults: dict[str, Mapping[str, Any]] = {}
        newest: dict[str, WorkerInfo] = {}
        capacity: dict[str, int] = {}
        envelopes: dict[str, int] = {}
        instances: dict[str, int] = {}
        for worker in workers:
            group = worker.worker_id
            instances[group] = instances.get(group, 0) + 1
            capacity[group] = capacity.get(group, 0) + max(worker.concurrency, 1)
            envelopes[group] = min(envelopes.get(group, worker.envelope_jobs), worker.envelope_jobs)
            seen = newest.get(group)
            if seen is None or (worker.started_at, worker.instance_id) > (
                seen.started_at,
                seen.instance_id,
            ):
                newest[group] = worker
        # A group runs what its most recently started instance declares: a type a deploy
        # took away from the group stops reaching it as soon as one new instance registers.
        for group, worker in sorted(newest.items()):
            for job_type, description in worker.job_types.items():
                by_type.setdefault(job_type, set()).add(group)
                defaults.setdefault(job_type, description)
        self._workers, self._by_type, self._defaults = workers, by_type, defaults
        self._capacity = capacity
        self._envelopes = {group: size for group, size in envelopes.items() if size > 1}
        self._instances = instances
        self._routes.clear()
        roster = tuple((w.instance_id, w.started_at) for w in workers)
        if roster != self._roster:
            self._roster = roster
            self._generation += 1
        self._read_at = time.monotonic()
        if self._history is not None and not self._history_read:
            await self._sync_history(self._history)  # read once: what is kept
        if self._history_read:  # record the schemas that differ from what is kept
            self._note_schemas(newest)
        for job_type, groups in by_type.items():
            known = self._declared.setdefault(job_type, set())
            if not groups <= known:
                self._unrecorded.update((job_type, group) for group in groups - known)
                known.update(groups)
        if self._history is not None and (self._unrecorded or self._unpublished):
            await self._sync_history(self._history)

    def _note_schemas(self, newest: Mapping[str, WorkerInfo]) -> None:
        """Note each live group's schemas that differ from the ones kept (to be recorded)."""
        now: datetime | None = None
        for group, worker in newest.items():
            for job_type, description in worker.job_types.items():
                schema = description.get("schema") if isinstance(description, Mapping) else None
                known = self._published.get((job_type, group))
                if known is None or known.schema != schema:
                    now = now or utcnow()
                    published = PublishedSchema(job_type, group, schema, now)
                    self._published[(job_type, group)] = published
                    if self._schema_store is not None:
                        self._unpublished[(job_type, group)] = published

    async def _sync_history(self, history: JobTypeHistory) -> None:
        """Read the job types ever declared (once) and record the ones first seen live; a
        store that does not answer is logged and tried again on the next refresh."""
        try:
            if not self._history_read:
                for job_type, group in await history.declared_job_types():
                    self._declared.setdefault(job_type, set()).add(group)
                if self._schema_store is not None:
                    for kept in await self._schema_store.published_schemas():
                        self._published.setdefault((kept.job_type, kept.worker_id), kept)
                self._history_read = True
            if self._unrecorded:
                pairs = sorted(self._unrecorded)
                self._unrecorded.clear()
                try:
                    await history.record_job_types(pairs, utcnow())
                except BackendUnavailableError:
                    self._unrecorded.update(pairs)
                    raise
            if self._unpublished and self._schema_store is not None:
                published = dict(self._unpublished)
                self._unpublished.clear()
                try:
                    await self._schema_store.record_schemas(list(published.values()))
                except BackendUnavailableError:
                    self._unpublished = {**published, **self._unpublished}
                    raise
        except BackendUnavailableError as exc:
            log.warning("job type history unavailable: %s", exc)

    async def live(self) -> list[WorkerInfo]:
        """The live worker instances (read again if the cache is old)."""
        await self.refresh()
        return self.workers

    def serves(self, job_type: str, worker_id: str | None) -> bool:
        """Whether a live worker (of group ``worker_id``, if given) declares ``job_type``."""
        groups = self._by_type.get(job_type)
        if not groups:
            return False
        return worker_id is None or worker_id in groups

    @property
    def complete(self) -> bool:
        """Whether :meth:`declared` knows the whole story: the registry was read and the
        history (if any) too."""
        return self._read_at > 0 and self._history_read

    def declared(self, job_type: str, worker_id: str | None = None) -> bool:
        """Whether any worker (of group ``worker_id``, if given) has ever declared
        ``job_type``: live now, seen live before, or in the history."""
        groups = self._declared.get(job_type)
        if not groups:
            return False
        return worker_id is None or worker_id in groups

    def plain_fire_facts(
        self,
    ) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, int | None, float | None], ...]]:
        """What :class:`~rota.core.planning.PlainFires` takes from the directory: the
        (job type, group) pairs ever declared, and each type's declared ``maxRetries`` and
        ``timeoutSeconds`` (:func:`~rota.core.planning.with_type_defaults`' values). A type
        whose defaults are not numbers is left out of both: its jobs are planned one by one,
        where the planner reports it."""
        defaults: list[tuple[str, int | None, float | None]] = []
        odd: set[str] = set()
        for job_type, description in self._defaults.items():
            if not isinstance(description, Mapping):
                odd.add(job_type)
                continue
            retries, timeout = description.get("maxRetries"), description.get("timeoutSeconds")
            try:
                defaults.append(
                    (
                        job_type,
                        None if retries is None else int(retries),
                        None if timeout is None else float(timeout),
                    )
                )
            except (TypeError, ValueError):
                odd.add(job_type)
        declared = tuple(
            (job_type, group)
            for job_type, groups in self._declared.items()
            if job_type not in odd
            for group in groups
        )
        return declared, tuple(defaults)

    def type_description(
        self, job_type: str, worker_id: str | None = None
    ) -> Mapping[str, Any] | None:
        """What a live worker (of group ``worker_id`` if given and one of it is live, else
        any) declared about ``job_type`` (defaults, data schema), if any."""
        if worker_id is not None:
            for worker in self._workers:
                if worker.worker_id == worker_id and job_type in worker.job_types:
                    return worker.job_types[job_type]
        return self._defaults.get(job_type)

    def published_schema(
        self, job_type: str, worker_id: str | None = None
    ) -> PublishedSchema | None:
        """The data schema last published for ``job_type``, live or not: ``worker_id``'s
        group's if it published one, else the latest any group did; ``None`` if none is
        known (the type's workers registered before the store kept schemas)."""
        if worker_id is not None and (job_type, worker_id) in self._published:
            return self._published[(job_type, worker_id)]
        kept = [p for (t, _), p in self._published.items() if t == job_type]
        return max(kept, key=lambda p: (p.published_at, p.worker_id), default=None)

    def data_description(
        self, job_type: str, worker_id: str | None = None
    ) -> Mapping[str, Any] | None:
        """What job data of ``job_type`` is checked against: a live worker's declaration
        (:meth:`type_description`), else the schema last published for the type."""
        live = self.type_description(job_type, worker_id)
        if live is not None:
            return live
        kept = self.published_schema(job_type, worker_id)
        return None if kept is None else {"schema": kept.schema}

    def groups_for(self, job_type: str) -> set[str]:
        return set(self._by_type.get(job_type, ()))

    def route(self, job_type: str, worker_id: str | None, key: UUID) -> str | None:
        """The one worker group an occurrence of ``job_type`` is sent to (``key``: its id,
        which spreads the occurrences of a type over the groups that run it).

        A job naming its group (``worker_id``) goes to that group, live or not (its queue
        keeps the message until an instance takes it). Otherwise: one of the live groups
        that run the type, in proportion to their instances' concurrency; if none is live,
        one of the groups that ever declared it and are not live now (a group live without
        the type has stopped running it); ``None`` when there is no such group (the
        occurrence waits, undispatched, for a worker)."""
        if worker_id is not None:
            return worker_id
        route = self._routes.get((job_type, None), _MISSING)
        if route is _MISSING:
            route = self._routes[(job_type, None)] = self._route_of(job_type)
        if route is None:
            return None
        assert isinstance(route, _Route)
        return route.pick(key)

    def _route_of(self, job_type: str) -> _Route | None:
        live = sorted(self._by_type.get(job_type, ()))
        if live:
            return _Route(live, [self._capacity.get(group, 1) for group in live])
        gone = sorted(self._declared.get(job_type, set()) - set(self._capacity))
        return _Route(gone, [1] * len(gone)) if gone else None

    @property
    def workers(self) -> list[WorkerInfo]:
        return list(self._workers)

    @property
    def generation(self) -> int:
        """Changes whenever a worker instance registers or goes away (not on heartbeats):
        what the instances declare can only have changed when this has."""
        return self._generation


class _Route:
    """The groups an unpinned job type is sent to, with their weights."""

    __slots__ = ("_bounds", "_groups", "_total")

    def __init__(self, groups: list[str], weights: list[int]) -> None:
        self._groups = groups
        self._bounds = list(itertools.accumulate(weights))
        self._total = self._bounds[-1]

    def pick(self, key: UUID) -> str:
        if len(self._groups) == 1:
            return self._groups[0]
        # The low bits of a UUIDv7 are random: an even spread by weight, and the same group
        # for the same occurrence while the roster stays as it is.
        return self._groups[bisect.bisect_right(self._bounds, key.int % self._total)]


_MISSING: Any = object()


def _declaration(info: WorkerInfo) -> tuple[str, int, tuple[str, ...], str]:
    return info.worker_id, info.concurrency, tuple(sorted(info.job_types)), info.version


def roster_changes(
    before: Mapping[str, WorkerInfo], after: Mapping[str, WorkerInfo]
) -> list[Event]:
    """``worker.changed`` events between two readings of the registry (instance id -> info):
    ``joined``, ``left``, and ``changed`` (group, concurrency, job types or version; not the
    load, which moves with every heartbeat)."""
    events = [worker_changed("left", before[i]) for i in sorted(set(before) - set(after))]
    for instance_id in sorted(after):
        info = after[instance_id]
        old = before.get(instance_id)
        if old is None:
            events.append(worker_changed("joined", info))
        elif _declaration(old) != _declaration(info):
            events.append(worker_changed("changed", info))
    return events


class RosterWatcher:
    """``worker.changed`` events when worker instances join, leave or change what they
    declare. Every server sees the same registry: only the one ``reporting()`` says (the
    owner of bucket 0) emits them. A registry that does not answer is logged at debug and read
    again next time."""

    def __init__(
        self,
        workers: WorkerDirectory,
        events: EventPublisher,
        reporting: Callable[[], bool],
        *,
        interval: float = ROSTER_INTERVAL,
    ) -> None:
        self._workers = workers
        self._events = events
        self._reporting = reporting
        self._interval = interval
        self._roster: dict[str, WorkerInfo] | None = None
        self._stopping = asyncio.Event()

    async def check(self) -> None:
        """Read the registry; emit what changed since the last reading (if reporting)."""
        await self._workers.refresh(force=True)
        roster = {w.instance_id: w for w in self._workers.workers}
        if self._roster is not None and self._reporting():
            self._events.emit(roster_changes(self._roster, roster))
        self._roster = roster

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        await run_periodically(
            "worker watch",
            self.check,
            self._interval,
            self._stopping,
            log=log,
            expected_level=logging.DEBUG,
        )
