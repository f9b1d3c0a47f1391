"""Bodies of the worker endpoints."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rota.api.schemas.common import ApiModel


class WorkerInstanceOut(ApiModel):
    instance_id: str
    host: str
    pid: int
    version: str
    concurrency: int
    current_load: int
    started_at: datetime
    last_heartbeat: datetime
    job_types: list[str]


class WorkerGroupOut(ApiModel):
    worker_id: str
    """The group: jobs naming it are routed to its queue."""
    instances: list[WorkerInstanceOut]
    capacity: int
    """The concurrency of all its live instances together."""
    load: int
    """Jobs its instances run now."""
    job_types: dict[str, dict[str, Any]]
    """Job type -> what an instance declared about it (data schema, defaults, schedule)."""


class WorkerList(ApiModel):
    items: list[WorkerGroupOut]
