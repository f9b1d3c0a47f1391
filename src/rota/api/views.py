"""Presentation helpers shared by the API routes and the dashboard's pages (so the
dashboard needs no route module): status filters read from query values, the worker
registry grouped by worker group, a job as the API shows it (with its warnings), and what
needs every operator's attention (:func:`attention`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rota.api.deps import ApiRuntime
from rota.api.schemas.common import status_name
from rota.api.schemas.jobs import JobOut, JobWarningOut
from rota.api.schemas.workers import WorkerGroupOut, WorkerInstanceOut
from rota.core.errors import ValidationError
from rota.core.models import Job, OccurrenceStatus, WorkerInfo
from rota.services.attention import Attention, read_attention
from rota.services.jobs import JobService
from rota.services.silence import SilenceMonitor

_BY_NAME = {status_name(s).lower(): s for s in OccurrenceStatus} | {
    s.name.lower(): s for s in OccurrenceStatus
}


def parse_statuses(values: list[str]) -> tuple[OccurrenceStatus, ...]:
    """``["0,1", "failed"]`` -> Queued, Running, Failed: codes or names, repeated or
    comma-separated."""
    statuses: dict[OccurrenceStatus, None] = {}
    for value in values:
        for token in (t.strip() for t in value.split(",")):
            if token:
                statuses[_status(token)] = None
    return tuple(statuses)


def _status(token: str) -> OccurrenceStatus:
    try:
        return OccurrenceStatus(int(token)) if token.isdigit() else _BY_NAME[token.lower()]
    except (ValueError, KeyError) as exc:
        codes = ", ".join(f"{s.value} {status_name(s)}" for s in OccurrenceStatus)
        raise ValidationError(f"unknown status {token!r} (one of {codes})", field="status") from exc


def _instance(info: WorkerInfo) -> WorkerInstanceOut:
    return WorkerInstanceOut(
        instance_id=info.instance_id,
        host=info.host,
        pid=info.pid,
        version=info.version,
        concurrency=info.concurrency,
        current_load=info.current_load,
        started_at=info.started_at,
        last_heartbeat=info.last_heartbeat,
        job_types=sorted(info.job_types),
    )


def group_workers(workers: list[WorkerInfo]) -> list[WorkerGroupOut]:
    """Instances grouped by worker group, groups and instances sorted by id."""
    groups: dict[str, list[WorkerInfo]] = {}
    for info in workers:
        groups.setdefault(info.worker_id, []).append(info)
    out: list[WorkerGroupOut] = []
    for worker_id in sorted(groups):
        members = sorted(groups[worker_id], key=lambda w: w.instance_id)
        types: dict[str, Mapping[str, Any]] = {}
        for info in members:
            for name, description in info.job_types.items():
                types.setdefault(name, description)
        out.append(
            WorkerGroupOut(
                worker_id=worker_id,
                instances=[_instance(w) for w in members],
                capacity=sum(w.concurrency for w in members),
                load=sum(w.current_load for w in members),
                job_types={name: dict(types[name]) for name in sorted(types)},
            )
        )
    return out


def job_out(job: Job, jobs: JobService) -> JobOut:
    """The job as the API shows it, with its warnings (from the worker registry as the job
    service last read it)."""
    warnings = [JobWarningOut(code=w.code, message=w.message) for w in jobs.job_warnings(job)]
    return JobOut.of(job, jobs.auto_disable_defaults, warnings)


async def attention(runtime: ApiRuntime) -> Attention:
    """Dispatching stopped, and the silence alerts open on this server and every other live
    one (a runtime without a silence monitor, as in some tests: the switch alone)."""
    store = runtime.store
    monitor: SilenceMonitor | None = getattr(runtime, "silence", None)
    if monitor is None:
        return await read_attention(store)
    own_id = getattr(runtime, "instance_id", None)
    instances = await runtime.coordination.instances()
    others = {name: info for name, info in instances.items() if name != own_id}
    return await read_attention(store, own_alerts=monitor.active, others=others)
