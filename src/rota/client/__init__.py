"""The Python client of Rota's REST API: :class:`Client` (async, on httpx) and a thin
:class:`SyncClient` facade.

::

    async with rota.Client("http://localhost:8000", username="admin", password="…") as client:
        job = await client.create_job(job_type="GenerateReportJob", cron_expression="0 6 * * *")
        async for event in client.events(types=["occurrence.updated"], job_id=job.id):
            print(event.type, event.data["statusName"])

Responses are the API's own models (camelCase on the wire, snake_case attributes). Every error
the API answers is raised as an :class:`ApiError` subclass carrying the problem details.
"""

from rota.client.aio import Client
from rota.client.errors import (
    ApiAuthError,
    ApiConflictError,
    ApiError,
    ApiNotFoundError,
    ApiPayloadTooLargeError,
    ApiUnavailableError,
    ApiValidationError,
)
from rota.client.events import StreamEvent
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
    "StreamEvent",
    "SyncClient",
]
