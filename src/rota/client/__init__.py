"""The Python client of Rota's REST API: :class:`Client` (async, on httpx) and a thin
:class:`SyncClient` facade.

::

    async with rota.Client("http://localhost:8000", username="admin", password="…") as client:
        job = await client.create_job(job_type="GenerateReportJob", cron_expression="0 6 * * *")
        async for event in client.events(types=["occurrence.updated"], job_id=job.id):
            print(event.type, event.data["statusName"])

A job runs from its definition, typed (``await generate_report.now(client, Report(…))``), or
by name (``await client.enqueue("GenerateReportJob", {…})``); either returns a
:class:`JobHandle`: ``await handle.result(timeout=60)`` is the handler's result, or a
:class:`RunFailedError` with the run. Arguments take Python's types (aware datetimes,
timedeltas, UUIDs, enums, pydantic models), at any depth of the job data.

Responses are the API's own models (camelCase on the wire, snake_case attributes). Every error
the API answers is raised as an :class:`ApiError` subclass carrying the problem details.
"""

from rota.client.aio import Client
from rota.client.encoding import ClientValueError
from rota.client.errors import (
    ApiAuthError,
    ApiConflictError,
    ApiError,
    ApiNotFoundError,
    ApiPayloadTooLargeError,
    ApiUnavailableError,
    ApiValidationError,
    RunFailedError,
)
from rota.client.events import StreamEvent
from rota.client.handles import JobHandle, SyncJobHandle
from rota.client.sync import SyncClient

__all__ = [
    "ApiAuthError",
    "ApiConflictError",
    "ApiError",
    "ApiNotFoundError",
    "ApiPayloadTooLargeError",
    "ApiUnavailableError",
    "ApiValidationError",
    "Client",
    "ClientValueError",
    "JobHandle",
    "RunFailedError",
    "StreamEvent",
    "SyncClient",
    "SyncJobHandle",
]
