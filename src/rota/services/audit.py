"""The audit log: who changed what, when, with the state before and after."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rota.core.dependencies import Dependency
from rota.core.errors import BackendUnavailableError
from rota.core.ids import new_id
from rota.core.models import Job
from rota.core.ports import AuditStore
from rota.core.records import Page
from rota.core.security import AuditEntry, AuditQuery

log = logging.getLogger(__name__)


JobView = Callable[[Sequence[Job], Sequence[Dependency]], Awaitable[Any]]
"""The new state of changed jobs as their audit entry records it: given the jobs about to be
stored and their upstreams (the API's view of a job, a bulk create's count and ids)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditNote:
    """An audit entry to write in the transaction of the change it describes (a job created
    or changed by :class:`~rota.services.jobs.JobService`): the change and its record are
    stored together or not at all."""

    actor: str
    action: str
    after: JobView
    before: Any = None

    async def entry(
        self, jobs: Sequence[Job], edges: Sequence[Dependency], at: datetime
    ) -> AuditEntry:
        """The entry for ``jobs`` (one job: its id is the entry's resource id)."""
        return AuditEntry(
            id=new_id(),
            at=at,
            actor=self.actor,
            action=self.action,
            resource_type="job",
            resource_id=str(jobs[0].id) if len(jobs) == 1 else None,
            before=self.before,
            after=await self.after(jobs, edges),
        )


class AuditService:
    """Writes and reads audit entries. The API calls :meth:`record` after each change, with
    the signed-in user as the actor."""

    def __init__(self, store: AuditStore, clock: Callable[[], datetime]) -> None:
        self._store = store
        self._clock = clock

    async def record(
        self,
        actor: str,
        action: str,
        resource_type: str,
        resource_id: object = None,
        *,
        before: Any = None,
        after: Any = None,
    ) -> AuditEntry:
        """Store one entry (``before``/``after`` must be JSON-ready: dicts, lists, strings,
        numbers). The change it describes is done already: a store that fails now is logged
        loudly and raised."""
        entry = AuditEntry(
            id=new_id(),
            at=self._clock(),
            actor=actor,
            action=action,
            resource_type=resource_type,
            resource_id=None if resource_id is None else str(resource_id),
            before=before,
            after=after,
        )
        try:
            await self._store.append_audit([entry])
        except BackendUnavailableError:
            log.error(
                "audit entry not stored: %s %s %s by %s",
                action,
                resource_type,
                entry.resource_id,
                actor,
                extra={"action": "audit_lost"},
            )
            raise
        return entry

    async def list(self, query: AuditQuery) -> Page[AuditEntry]:
        return await self._store.list_audit(query)
