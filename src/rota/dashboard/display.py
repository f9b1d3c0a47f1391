"""How values read on the dashboard: enum members in words, times relative to now, and the
job names a page of occurrences or failures shows (one store read per page)."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final
from uuid import UUID

from rota.core.jobfields import JOB_FIELDS
from rota.core.models import Job
from rota.core.ports import JobStore
from rota.core.records import JobQuery

# --- enum members in words ----------------------------------------------------------------

_WORDS: Final[dict[str, dict[str, str]]] = {
    "MisfirePolicy": {
        "fire_once": "run once for all missed fires",
        "catch_up": "run every missed fire",
        "skip": "skip missed fires",
    },
    "ConcurrencyPolicy": {
        "0": "skip the fire while one runs",
        "1": "queue it while one runs",
        "2": "run every fire, even alongside",
        "3": "queue one while one runs, skip more",
        "4": "cancel the running one for the new fire",
    },
    "Priority": {"0": "very low", "1": "low", "2": "medium", "3": "high", "4": "critical"},
    "SkipReason": {
        "misfire": "missed fire",
        "overlap": "the previous run was still going",
        "no_worker": "no worker online",
        "paused": "the job was paused",
        "skip_next": "one of the next fires skipped on request",
        "upstream": "an upstream's outcome did not meet its rule",
    },
    "FailureType": {
        "retries_exhausted": "retries exhausted",
        "permanent": "permanent",
        "timed_out": "timed out",
        "zombie": "lost (no sign of life)",
        "poison": "poison message",
        "unknown_job_type": "unknown job type",
        "invalid_data": "invalid data",
    },
    "JobSource": {"api": "created through the API", "code": "declared in worker code"},
    "ZombiePolicy": {"requeue": "run it again", "fail": "fail it"},
    "resolution": {"wont_fix": "won't fix"},
}


CHOICES: Final = {f.api: f.enum.__name__ for f in JOB_FIELDS if f.versioned and f.enum is not None}
"""The versioned job fields whose values are enum members (API name -> the enum's name)."""


def human(value: Any, kind: str | None = None) -> str:
    """An enum member (or a plain value of the ``kind`` named) in words: ``fire_once`` ->
    "run once for all missed fires"; anything unknown with its underscores as spaces."""
    if value is None:
        return "—"
    if isinstance(value, enum.Enum):
        kind = kind or type(value).__name__
        value = value.value
    text = str(value)
    words = _WORDS.get(kind or "", {})
    return words.get(text, text.replace("_", " "))


# --- times relative to now --------------------------------------------------------------------

_UNITS: Final = ((86_400 * 365, "year"), (86_400 * 30, "month"), (86_400, "day"),
                 (3600, "h"), (60, "min"), (1, "s"))  # fmt: skip


def relative(value: datetime, now: datetime | None = None) -> str:
    """``3 min ago``, ``in 2 h``, ``just now``: the largest whole unit (the page's script
    keeps it current)."""
    seconds = ((now or datetime.now(UTC)) - value).total_seconds()
    size = abs(seconds)
    if size < 5:
        return "just now"
    for unit, name in _UNITS:
        if size >= unit:
            count = int(size // unit)
            label = f"{count} {name}" + (
                "s" if name in ("year", "month", "day") and count > 1 else ""
            )
            return f"{label} ago" if seconds > 0 else f"in {label}"
    return "just now"


# --- job names --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobName:
    """What a row shows of its job: the name (its display name, else its type) and type."""

    id: UUID
    name: str
    job_type: str
    named: bool
    """The job has a display name (the type then goes beside it as secondary text)."""


def name_of(job: Job) -> JobName:
    return JobName(job.id, job.display_name or job.job_type, job.job_type, bool(job.display_name))


async def job_names(store: JobStore, ids: Iterable[UUID | None]) -> dict[UUID, JobName]:
    """The jobs of a page's rows, in one read (a deleted job is missing from the answer)."""
    wanted = tuple(dict.fromkeys(i for i in ids if i is not None))
    if not wanted:
        return {}
    page = await store.list_jobs(JobQuery(ids=wanted, limit=len(wanted)))
    return {j.id: name_of(j) for j in page.items}
