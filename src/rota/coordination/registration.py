"""A worker instance's registration as it is kept in Redis (docs/protocol.md §9): the JSON a
worker writes, and reading it back (a malformed one is refused, and skipped by the reader)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson

from rota.core.jsonlimits import MAX_JSON_DEPTH, value_too_deep
from rota.core.models import WorkerInfo
from rota.core.wire import MAX_ENVELOPE_JOBS


def worker_json(info: WorkerInfo) -> bytes:
    return orjson.dumps(
        {
            "instanceId": info.instance_id,
            "workerId": info.worker_id,
            "host": info.host,
            "pid": info.pid,
            "jobTypes": info.job_types,
            "concurrency": info.concurrency,
            "version": info.version,
            "currentLoad": info.current_load,
            "startedAt": info.started_at,
            "lastHeartbeat": info.last_heartbeat,
            "envelopeJobs": info.envelope_jobs,
        }
    )


def worker_from_json(raw: bytes) -> WorkerInfo:
    """A registration as a worker wrote it; ``ValueError`` (or ``KeyError``, ``TypeError``)
    when malformed. What it declares about its job types (data schemas, defaults) is shown by
    the API and the dashboard, so it may nest at most
    :data:`~rota.core.jsonlimits.MAX_JSON_DEPTH` levels (deeper could not be written back)."""
    data: dict[str, Any] = orjson.loads(raw)
    if not isinstance(data.get("jobTypes"), dict):
        raise ValueError("jobTypes must be an object")
    if value_too_deep(data["jobTypes"], MAX_JSON_DEPTH):
        raise ValueError(f"jobTypes nested more than {MAX_JSON_DEPTH} levels deep")
    return WorkerInfo(
        instance_id=data["instanceId"],
        worker_id=data["workerId"],
        host=data["host"],
        pid=data["pid"],
        job_types=data["jobTypes"],
        concurrency=data["concurrency"],
        version=data.get("version", ""),
        current_load=data.get("currentLoad", 0),
        started_at=datetime.fromisoformat(data["startedAt"]),
        last_heartbeat=datetime.fromisoformat(data["lastHeartbeat"]),
        envelope_jobs=_envelope_jobs(data.get("envelopeJobs")),
    )


def _envelope_jobs(value: object) -> int:
    """``envelopeJobs`` as announced: an integer of at least 2 (at most
    :data:`~rota.core.wire.MAX_ENVELOPE_JOBS` are used), else no envelopes."""
    if type(value) is int and value > 1:
        return min(value, MAX_ENVELOPE_JOBS)
    return 0
