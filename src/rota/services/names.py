"""The names beside the ids: the display name of the job of each occurrence, failure or graph
run of a page, and the name of what an audit entry is about (one read per page)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from rota.core.errors import NotFoundError
from rota.core.ports import JobStore, UserStore
from rota.core.ports.lookup import IdLookup
from rota.core.records import JobQuery
from rota.core.security import AuditEntry


async def job_display_names(store: JobStore, ids: Iterable[UUID | None]) -> dict[UUID, str]:
    """The display name of each job that exists among ``ids`` (its type when it has none),
    in one read; a deleted job is left out."""
    wanted = tuple(dict.fromkeys(i for i in ids if i is not None))
    if not wanted:
        return {}
    page = await store.list_jobs(JobQuery(ids=wanted, limit=len(wanted)))
    return {job.id: job.display_name or job.job_type for job in page.items}


def _uuid(value: object) -> UUID | None:
    try:
        return UUID(str(value))
    except ValueError:
        return None


def _state(entry: AuditEntry, key: str) -> Any:
    """``key`` of the entry's state after (else before), if the state is an object."""
    for state in (entry.after, entry.before):
        if isinstance(state, Mapping) and state.get(key) is not None:
            return state[key]
    return None


async def occurrence_job_names(
    occurrence_ids: Iterable[UUID], jobs: JobStore, lookup: IdLookup
) -> dict[UUID, tuple[UUID, str | None]]:
    """Occurrence id -> its job's id and display name (null: the job was deleted), in two
    reads; an unknown occurrence is left out."""
    job_of = await lookup.occurrence_jobs(list(dict.fromkeys(occurrence_ids)))
    names = await job_display_names(jobs, job_of.values())
    return {occ: (job, names.get(job)) for occ, job in job_of.items()}


@dataclass(slots=True)
class _Wanted:
    """What a page of entries needs read to be named."""

    jobs: dict[UUID, UUID] = field(default_factory=dict)
    """Entry id -> job id."""
    occurrences: dict[UUID, UUID] = field(default_factory=dict)
    """Entry id -> the occurrence whose job names it."""
    users: dict[UUID, UUID] = field(default_factory=dict)
    named: dict[UUID, str] = field(default_factory=dict)
    """Entries named by the state they kept."""

    def add(self, entry: AuditEntry) -> None:
        rid = _uuid(entry.resource_id) if entry.resource_id else None
        kind = entry.resource_type
        if kind in ("occurrence", "failed_occurrence"):
            job_id = _uuid(_state(entry, "jobId"))
            if job_id is not None:
                self.jobs[entry.id] = job_id
            elif kind == "occurrence" and rid is not None:
                self.occurrences[entry.id] = rid
            return
        kept = _state(entry, {"user": "username", "api_key": "name"}.get(kind, ""))
        if kind == "job" and rid is not None:
            self.jobs[entry.id] = rid
        elif kind in ("user", "api_key") and isinstance(kept, str):
            self.named[entry.id] = kept
        elif kind == "user" and rid is not None:
            self.users[entry.id] = rid


async def audit_names(
    entries: Sequence[AuditEntry], jobs: JobStore, users: UserStore, lookup: IdLookup
) -> dict[UUID, str]:
    """Entry id -> the name of its resource: a job's display name (of the job, or of the job of
    the occurrence or failure the entry is about), a user's username, an API key's name. The
    jobs of a page are read in one read (a deleted one is named by the state an entry of the
    page kept of it: its creation, its deletion),
    the jobs of its occurrences in one more; a user by the name its state kept, else read (the
    few users of a page)."""
    wanted = _Wanted()
    for entry in entries:
        wanted.add(entry)
    if wanted.occurrences:
        found = await lookup.occurrence_jobs(list(wanted.occurrences.values()))
        wanted.jobs |= {e: found[o] for e, o in wanted.occurrences.items() if o in found}
    names = await job_display_names(jobs, wanted.jobs.values())
    # a deleted job: the name an entry of the page kept of it (its creation, its deletion)
    for entry in entries:
        kept = _state(entry, "displayName") if entry.resource_type == "job" else None
        job_id = wanted.jobs.get(entry.id)
        if job_id is not None and isinstance(kept, str) and kept:
            names.setdefault(job_id, kept)
    named = dict(wanted.named)
    named |= {e: names[j] for e, j in wanted.jobs.items() if j in names}
    return named | await _usernames(users, wanted.users)


async def _usernames(users: UserStore, wanted: Mapping[UUID, UUID]) -> dict[UUID, str]:
    """Entry id -> the username of its user (a deleted user is left out)."""
    found: dict[UUID, str] = {}
    for user_id in dict.fromkeys(wanted.values()):
        try:
            found[user_id] = (await users.get_user(user_id)).username
        except NotFoundError:
            continue
    return {e: found[u] for e, u in wanted.items() if u in found}
