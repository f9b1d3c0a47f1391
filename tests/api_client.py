"""An httpx client on a Rota ASGI app, for the API tests.

Every API test builds its client here, so signing in (issue 5) is added in one place: the
client is signed in as a user of ``role`` once the API requires authentication.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI


@asynccontextmanager
async def api_client(app: FastAPI, role: str = "admin") -> AsyncIterator[httpx.AsyncClient]:
    """A client on ``app`` (base URL ``http://rota``) acting with ``role``."""
    del role  # no sign-in yet
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://rota") as http:
        yield http
