"""The SQL store's scheduling: due jobs, dispatching them (claim, plan, insert, advance in one
transaction), undispatched and stale occurrences."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any
from uuid import UUID

import msgspec
from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    bindparam,
    func,
    insert,
    literal_column,
    or_,
    select,
    true,
)
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import UpdateBase

from rota.core.models import ConcurrencyPolicy, Job, Occurrence, OccurrenceStatus, ZombiePolicy
from rota.core.planning import FirePlan, PlainFires, stored_policy
from rota.core.records import DispatchResult, DueEntry, FirePlanner, StaleOccurrence
from rota.stores.schema import UtcDateTime, jobs, occurrences, utc_text
from rota.stores.sql.aggregates import AggregateQueries, StatDeltas
from rota.stores.sql.engine import guard_errors
from rota.stores.sql.firing import PlainFire
from rota.stores.sql.pausing import advance_jobs
from rota.stores.sql.rows import (
    _PLANNING_COLUMNS,
    ACTIVE,
    UNSTARTED_COLUMNS,
    _last_sign,
    _occurrence_row,
    _to_occurrence,
    _to_planning_job,
    _unique,
)
from rota.stores.sql.sending import insert_batch
from rota.stores.sql.statements import (
    _fetch_in,
    _insert_or_skip_stmt,
    status_in,
)

log = logging.getLogger(__name__)


class DispatchQueries(AggregateQueries):
    """Scheduling of the :class:`~rota.core.ports.Store` port: dispatch and the sweeps."""

    # --- scheduling -----------------------------------------------------------------------

    async def due_jobs(
        self, until: datetime, buckets: Sequence[int] | None, limit: int
    ) -> list[DueEntry]:
        if buckets is not None and not buckets:
            return []
        async with self._read() as conn:
            rows = (await conn.execute(self.due_statement(until, buckets, limit))).all()
        return [DueEntry(r.id, r.bucket, r.next_run_at) for r in rows]

    def due_statement(
        self, until: datetime, buckets: Sequence[int] | None, limit: int
    ) -> Select[Any]:
        """What :meth:`due_jobs` reads: the active jobs due by ``until``, earliest first,
        through the schedule's index whatever the buckets (their filter is on the rows; the
        schedule needs no index of its own per bucket): ``(is_active, next_run_at)`` on
        SQLite, ``ix_jobs_schedule`` (``next_run_at`` of the active jobs) on PostgreSQL,
        whose planner takes a partial index for ``is_active = true`` (not ``IS true``)."""
        stmt = (
            select(jobs.c.id, jobs.c.bucket, jobs.c.next_run_at)
            .where(jobs.c.is_active == true(), jobs.c.next_run_at <= until)
            .order_by(jobs.c.next_run_at, jobs.c.id)
            .limit(max(0, limit))
        )
        if buckets is not None:
            stmt = stmt.where(jobs.c.bucket.in_(list(buckets)))
        return stmt

    async def dispatch_due(
        self,
        job_ids: Sequence[UUID],
        now: datetime,
        planner: FirePlanner,
        *,
        claim_until: datetime | None = None,
        plain: PlainFires | None = None,
    ) -> DispatchResult:
        ids = _unique(job_ids)
        if not ids:
            return DispatchResult()
        # Fired set-based unless the store seals data (it plans each fire) or, on SQLite, a
        # claim is asked for (a broker elsewhere: each job planned); built before the writer
        # is taken.
        plain_fire = None
        if plain is not None and self._seal is None and (self._hot is None or claim_until is None):
            plain_fire = PlainFire(self._dialect, ids, now, plain, sent=claim_until is not None)
        if self._hot is None or plain_fire is None:  # PostgreSQL, or none: one transaction
            return await self._dispatch(ids, now, planner, claim_until, plain_fire)
        # SQLite: the plain fires are a transaction of their own, one call to the hot writer
        # (.hotwriter); the jobs they leave are planned in the next one.
        async with guard_errors():
            fired_jobs = await self._hot.transaction(partial(self._fire_hot, plain_fire))
        done = set(fired_jobs)
        rest = [i for i in ids if i not in done]
        result = await self._dispatch(rest, now, planner, None, None) if rest else None
        next_runs: dict[UUID, DueEntry | None] = dict.fromkeys(fired_jobs)
        if result is None:
            return DispatchResult(queued=plain_fire.occurrences(), next_runs=next_runs)
        next_runs.update(result.next_runs)
        queued = [*plain_fire.occurrences(), *result.queued]
        return replace(result, queued=queued, next_runs=next_runs)

    def _fire_hot(self, plain_fire: PlainFire, db: sqlite3.Connection) -> list[UUID]:
        """SQLite, on the hot writer's thread: the plain fires and their count."""
        fired_jobs = plain_fire.run_sqlite(db)
        if fired_jobs:
            deltas = StatDeltas()
            deltas.totals[int(OccurrenceStatus.QUEUED)] += len(fired_jobs)  # uncounted
            self._write_aggregates_hot(db, deltas)
        return fired_jobs

    async def _dispatch(
        self,
        ids: list[UUID],
        now: datetime,
        planner: FirePlanner,
        claim_until: datetime | None,
        plain_fire: PlainFire | None,
    ) -> DispatchResult:
        """:meth:`dispatch_due` in one transaction (``plain_fire``, PostgreSQL's: the plain
        fires first)."""
        async with self._write() as conn:
            fired_jobs = await plain_fire.run(conn) if plain_fire is not None else []
            if fired_jobs:
                done = set(fired_jobs)
                ids = [i for i in ids if i not in done]
            claimed = await self._claim_jobs(conn, ids)
            next_runs = await self._absent_jobs(conn, [i for i in ids if i not in claimed])
            due = _due_now(claimed.values(), now, next_runs)
            active = await self._active_counts(conn, [j.id for j in due])
            plans = _plan_all(due, active, now, planner, next_runs)
            deltas = StatDeltas()
            deltas.totals[int(OccurrenceStatus.QUEUED)] += len(fired_jobs)  # uncounted
            planned = {o.id for plan in plans.values() for o in plan.occurrences}
            sent = _classify(due, plans, active, planned, {}).queued if claim_until else []
            at = min((o.created_at for o in sent), default=now)
            if fired_jobs and plain_fire is not None:
                at = plain_fire.now
            marks = dict.fromkeys((o.id for o in sent), at)
            inserted = await self._insert_planned(conn, due, plans, deltas, marks)
            sent_ids = [o.id for o in sent if o.id in inserted]
            if plain_fire is not None:
                sent_ids[:0] = plain_fire.ids()
            batch = await _record_batch(conn, sent_ids, claim_until, at)
            for job in due:  # a job retired by its plan (a one-time job's fire, a bound)
                if job.id in plans:
                    deltas.activation(job.is_active, plans[job.id].is_active)
            await self._write_aggregates(conn, deltas)  # the jobs it advances next are locked
            await advance_jobs(self._fast, conn, due, plans)
        fired = plain_fire.occurrences() if plain_fire is not None else []
        for job in due:
            if job.id in plans:
                plan = plans[job.id]
                next_runs[job.id] = _due_entry(job.id, job.bucket, plan)
        for job_id in fired_jobs:  # a one-time job's only fire: no next one
            next_runs[job_id] = None
        result = _classify(due, plans, active, inserted, next_runs)
        if batch is None and not fired:
            return result
        queued = [
            msgspec.structs.replace(o, dispatched_at=at) if o.id in marks else o
            for o in result.queued
        ]
        return replace(result, queued=[*fired, *queued], batch=batch)

    async def _claim_jobs(self, conn: AsyncConnection, ids: Sequence[UUID]) -> dict[UUID, Job]:
        """The requested jobs, locked; rows locked by another transaction are passed over."""
        rows = await _fetch_in(
            conn,
            lambda chunk: (
                select(*_PLANNING_COLUMNS)
                .where(self._member(jobs.c.id, chunk))
                .order_by(jobs.c.id)
                .with_for_update(skip_locked=True)
            ),
            ids,
        )
        return {r[0]: self._open_job(_to_planning_job(r)) for r in rows}

    async def _absent_jobs(
        self, conn: AsyncConnection, ids: Sequence[UUID]
    ) -> dict[UUID, DueEntry | None]:
        """``None`` for each requested id that is gone; ids locked elsewhere are left out."""
        if not ids:
            return {}
        if self._dialect == "sqlite":  # no row locks: a missing row is a deleted job
            return dict.fromkeys(ids)
        rows = await _fetch_in(
            conn, lambda chunk: select(jobs.c.id).where(self._member(jobs.c.id, chunk)), ids
        )
        locked = {r.id for r in rows}
        return {i: None for i in ids if i not in locked}

    async def _active_counts(self, conn: AsyncConnection, ids: Sequence[UUID]) -> dict[UUID, int]:
        if not ids:
            return {}
        rows = await _fetch_in(
            conn,
            lambda chunk: (
                select(occurrences.c.job_id, func.count())
                .where(
                    self._member(occurrences.c.job_id, chunk),
                    status_in(occurrences.c.status, ACTIVE),
                )
                .group_by(occurrences.c.job_id)
            ),
            ids,
        )
        return {r[0]: int(r[1]) for r in rows}

    async def _insert_planned(
        self,
        conn: AsyncConnection,
        due: Sequence[Job],
        plans: dict[UUID, FirePlan],
        deltas: StatDeltas,
        marks: dict[UUID, datetime],
    ) -> set[UUID]:
        """Insert the planned occurrences (a recorded fire is skipped by the unique key; one in
        ``marks`` is inserted dispatched then: the caller sends it), each with its
        creation status change in its history, counted in ``deltas``; returns the ids
        inserted. A one-time job's Queued fire is inserted uncounted: its job's counts and
        run statistics are read from it, no count row is written for it
        (:mod:`rota.stores.sql.aggregates`)."""
        rows = [  # a sequential plan's fires wait for each other as a Queue-policy job's do
            _occurrence_row(
                occ,
                stored_policy(job, plans[job.id]),
                marks.get(occ.id),
                counted=job.is_recurring or occ.status is not OccurrenceStatus.QUEUED,
            )
            for job in due
            if job.id in plans
            for occ in plans[job.id].occurrences
        ]
        if not self._seal_rows(rows):
            return set()
        count = await self._fast.execute(conn, "insert_planned", self._insert_planned_stmt, rows)
        planned = [row["id"] for row in rows]
        if count == len(rows):
            inserted = set(planned)
        else:  # some fires were recorded before, or the driver does not count: ask
            found = await _fetch_in(
                conn,
                lambda chunk: select(occurrences.c.id).where(self._member(occurrences.c.id, chunk)),
                planned,
            )
            inserted = {r.id for r in found}
        deltas.add_rows(row for row in rows if row["id"] in inserted)
        return inserted

    def _insert_planned_stmt(self, *, unnest: bool = False) -> UpdateBase:
        return _insert_or_skip_stmt(
            self._dialect,
            occurrences,
            skip=UNSTARTED_COLUMNS,
            conflict_keys=["job_id", "scheduled_for"],
            unnest=unnest,
        )

    async def insert_occurrences(
        self, occurrences_: Sequence[Occurrence], *, sequential: bool = False
    ) -> None:
        if not occurrences_:
            return
        job_ids = _unique(o.job_id for o in occurrences_)
        async with self._write() as conn:
            rows = await _fetch_in(
                conn,
                lambda chunk: select(jobs.c.id, jobs.c.concurrency_policy).where(
                    jobs.c.id.in_(chunk)
                ),
                job_ids,
            )
            policies = {r.id: ConcurrencyPolicy(r.concurrency_policy) for r in rows}
            if sequential:
                policies = dict.fromkeys(policies, ConcurrencyPolicy.QUEUE)
            inserted = [
                _occurrence_row(o, policies.get(o.job_id, ConcurrencyPolicy.SKIP))
                for o in occurrences_
            ]
            await conn.execute(insert(occurrences), self._seal_rows(inserted))
            deltas = StatDeltas()
            deltas.add_rows(inserted)
            await self._write_aggregates(conn, deltas)

    async def stale_occurrences(
        self,
        now: datetime,
        *,
        running_threshold: float,
        queued_threshold: float,
        limit: int,
    ) -> list[StaleOccurrence]:
        # Running rows are few (bounded by the workers' slots): the (status, id) index finds
        # them, and each one's silence is compared with its job's threshold. Queued rows may
        # be many (a backlog): ``ix_occurrences_queued`` (theirs only) cuts them down to
        # those dispatched before the global Queued threshold first.
        occ, j = occurrences.c, jobs.c
        joined = occurrences.outerjoin(jobs, j.id == occ.job_id)
        own = j.zombie_threshold_seconds
        last_sign = func.coalesce(occ.last_heartbeat, occ.start_time, occ.created_at)
        limit = max(0, limit)
        running = (
            select(occurrences, j.zombie_policy, own)
            .select_from(joined)
            .where(
                status_in(occ.status, [OccurrenceStatus.RUNNING]),
                self._silence(last_sign, now) > func.coalesce(own, running_threshold),
            )
            .order_by(last_sign, occ.id)
            .limit(limit)
        )
        queued_before = now - timedelta(seconds=queued_threshold)
        queued = (
            select(occurrences, j.zombie_policy, own)
            .select_from(joined)
            .where(
                status_in(occ.status, [OccurrenceStatus.QUEUED]),
                occ.dispatched_at.is_not(None),
                occ.dispatched_at < queued_before,
                or_(own.is_(None), self._silence(occ.dispatched_at, now) > own),
            )
            .order_by(occ.dispatched_at, occ.id)
            .limit(limit)
        )
        async with self._read() as conn:
            rows = [*(await conn.execute(running)).all(), *(await conn.execute(queued)).all()]
        found = [
            StaleOccurrence(
                occurrence=self._open_occurrence(_to_occurrence(r)),
                zombie_policy=None if r.zombie_policy is None else ZombiePolicy(r.zombie_policy),
                zombie_threshold_seconds=r.zombie_threshold_seconds,
            )
            for r in rows
        ]
        found.sort(key=lambda s: (_last_sign(s.occurrence), s.occurrence.id))
        return found[:limit]

    async def orphaned_occurrences(
        self,
        now: datetime,
        *,
        live_instances: Sequence[str],
        silent_for: float,
        limit: int,
    ) -> list[StaleOccurrence]:
        occ, j = occurrences.c, jobs.c
        joined = occurrences.outerjoin(jobs, j.id == occ.job_id)
        last_sign = func.coalesce(occ.last_heartbeat, occ.start_time, occ.created_at)
        gone = and_(
            occ.status == int(OccurrenceStatus.RUNNING),
            occ.instance_id.is_not(None),
            self._silence(last_sign, now) > silent_for,
        )
        if live_instances:
            gone = and_(gone, occ.instance_id.not_in(sorted(set(live_instances))))
        stmt = (
            select(occurrences, j.zombie_policy, j.zombie_threshold_seconds)
            .select_from(joined)
            .where(
                # the (status, id) index: Running and Unknown rows are few (workers' slots)
                status_in(occ.status, [OccurrenceStatus.RUNNING, OccurrenceStatus.UNKNOWN]),
                or_(occ.status == int(OccurrenceStatus.UNKNOWN), gone),
            )
            .order_by(last_sign, occ.id)
            .limit(max(0, limit))
        )
        async with self._read() as conn:
            rows = (await conn.execute(stmt)).all()
        return [
            StaleOccurrence(
                occurrence=self._open_occurrence(_to_occurrence(r)),
                zombie_policy=None if r.zombie_policy is None else ZombiePolicy(r.zombie_policy),
                zombie_threshold_seconds=r.zombie_threshold_seconds,
            )
            for r in rows
        ]

    def _silence(self, since: ColumnElement[Any], now: datetime) -> ColumnElement[Any]:
        """Seconds from ``since`` (a UTC datetime column) to ``now``, in SQL."""
        if self._dialect == "postgresql":
            moment = bindparam(None, now, type_=UtcDateTime())
            return func.extract("epoch", moment - since)
        moment = bindparam(None, utc_text(now))
        return (func.julianday(moment) - func.julianday(since)) * literal_column("86400.0")


def _due_now(
    claimed: Iterable[Job], now: datetime, next_runs: dict[UUID, DueEntry | None]
) -> list[Job]:
    """The claimed jobs due by ``now``; each of the others gets its next fire in
    ``next_runs`` (moved on meanwhile, or inactive)."""
    due: list[Job] = []
    for job in claimed:
        if job.is_active and job.next_run_at is not None and job.next_run_at <= now:
            due.append(job)
        else:
            next_runs[job.id] = _due_entry(job.id, job.bucket, job)
    return due


async def _record_batch(
    conn: AsyncConnection, sent: Sequence[UUID], claim_until: datetime | None, at: datetime
) -> UUID | None:
    """The record of the batch the dispatcher publishes (``sent``, claimed until
    ``claim_until``); none when it sends nothing (``claim_until`` ``None``: embedded)."""
    if claim_until is None or not sent:
        return None
    return await insert_batch(conn, sent, claim_until, at)


def _due_entry(job_id: UUID, bucket: int, state: Job | FirePlan) -> DueEntry | None:
    if not state.is_active or state.next_run_at is None:
        return None
    return DueEntry(job_id, bucket, state.next_run_at)


def _plan_all(
    due: Sequence[Job],
    active: dict[UUID, int],
    now: datetime,
    planner: FirePlanner,
    next_runs: dict[UUID, DueEntry | None],
) -> dict[UUID, FirePlan]:
    """Plan each due job. A job whose planning fails is left as it is (logged, reported with
    no next fire so the index drops it until the loader finds it due again)."""
    plans: dict[UUID, FirePlan] = {}
    for job in due:
        try:
            plans[job.id] = planner(job, active.get(job.id, 0), now)
        except Exception:
            log.exception("planning job %s failed; it stays due", job.id, extra={"job_id": job.id})
            next_runs[job.id] = None
    return plans


def _classify(
    due: Sequence[Job],
    plans: dict[UUID, FirePlan],
    active: dict[UUID, int],
    inserted: set[UUID],
    next_runs: dict[UUID, DueEntry | None],
) -> DispatchResult:
    """Sort the inserted occurrences into queued, held (Queue policy or a sequential plan,
    behind an earlier active occurrence) and skipped."""
    queued: list[Occurrence] = []
    held: list[Occurrence] = []
    skipped: list[Occurrence] = []
    displacing: dict[UUID, UUID] = {}
    for job in due:
        plan = plans.get(job.id)
        if plan is None:
            continue
        policy = ConcurrencyPolicy(job.concurrency_policy)
        busy = active.get(job.id, 0) > 0
        for occ in plan.occurrences:
            if occ.id not in inserted:
                continue
            if occ.status is not OccurrenceStatus.QUEUED:
                skipped.append(occ)
            elif (policy.waits or plan.sequential) and busy:
                held.append(occ)
            else:
                if busy and policy is ConcurrencyPolicy.CANCEL_OTHER:
                    displacing[job.id] = occ.id
                # a jittered fire is sent by the sweep when due (scheduled_for + jitter)
                (held if occ.jitter_seconds is not None else queued).append(occ)
                busy = True
    return DispatchResult(
        queued=queued, held=held, skipped=skipped, next_runs=next_runs, displacing=displacing
    )
