"""What the author of an accepted job should know about its type's workers: the
``warnings`` of a job's answer in the API and of its page in the dashboard."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from uuid import UUID

from rota.core.models import Job
from rota.core.ports.lookup import IdLookup
from rota.services.workers import WorkerDirectory

UNKNOWN_JOB_TYPE: Final = "unknown_job_type"
"""The warning code of a job whose type no worker has ever declared."""
NO_LIVE_WORKER: Final = "no_live_worker"
"""The warning code of a job whose type was declared before but has no live worker now."""
NAME_TAKEN: Final = "name_taken"
"""The warning code of a job whose display name another job has too."""
SHOWN_NAMESAKES: Final = 5


@dataclass(frozen=True, slots=True)
class JobWarning:
    """Something about an accepted job its author should know (``code``: stable, for
    scripts; ``message``: for people)."""

    code: str
    message: str
    job_ids: tuple[UUID, ...] = ()
    """The other jobs it is about (``name_taken``: those with the same name)."""


async def name_warnings(lookup: IdLookup, job: Job) -> list[JobWarning]:
    """``name_taken`` when other jobs have ``job``'s display name (ignoring case): a name
    then no longer names one job (the CLI asks for the id). One read."""
    others = [
        i for i in await lookup.jobs_named(job.display_name, SHOWN_NAMESAKES + 1) if i != job.id
    ][:SHOWN_NAMESAKES]
    if not others:
        return []
    ids = ", ".join(str(i) for i in others)
    return [
        JobWarning(
            NAME_TAKEN,
            f"another job is named {job.display_name!r} ({ids}): by name, neither can be told "
            "apart; use the id, or give this one another name",
            tuple(others),
        )
    ]


def job_type_warnings(
    workers: WorkerDirectory, job_type: str, worker_id: str | None
) -> list[JobWarning]:
    """``unknown_job_type`` when no worker has ever declared ``job_type`` (of group
    ``worker_id``, if given): its fires are recorded Skipped ``no_worker`` until one does;
    ``no_live_worker`` when one did but none of them is live now: its runs wait, and its data
    is checked against the schema a worker last published (if one is known). Nothing while
    the registry or the history could not be read."""
    if not workers.complete:
        return []
    group = f" in worker group {worker_id!r}" if worker_id else ""
    if not workers.declared(job_type, worker_id):
        return [
            JobWarning(
                UNKNOWN_JOB_TYPE,
                f"no worker has declared job type {job_type!r}{group}: its runs are "
                "recorded Skipped (no_worker) until a worker declaring it registers",
            )
        ]
    if workers.serves(job_type, worker_id):
        return []
    kept = workers.published_schema(job_type, worker_id)
    if kept is None or kept.schema is None:
        checked = "no data schema is known for it, so its data is not checked"
    else:
        at = kept.published_at.strftime("%Y-%m-%d %H:%M:%S")
        checked = (
            f"its data is checked against the data schema group {kept.worker_id!r} last "
            f"published for it (first seen {at} UTC)"
        )
    return [
        JobWarning(
            NO_LIVE_WORKER,
            f"no worker of job type {job_type!r}{group} is live now: its runs wait for one; "
            + checked,
        )
    ]
